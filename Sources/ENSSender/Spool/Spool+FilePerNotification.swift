internal import SenderWire
internal import POSIX
internal import OpenSSL

extension Spool {
    /// Moves notifications left by a version that kept one file per notification in
    /// `queue/` (sealed with the same key, the file name as associated data) into the
    /// log, then removes the old directories. A file that does not open is left in place.
    func importFilePerNotificationSpool() throws -> Int {
        let queue = directory + "/queue"
        guard Files.exists(queue) else { return 0 }
        var imported = 0
        for name in try Files.list(queue) {
            guard let sealed = try? Files.read(queue + "/" + name, limit: 1 << 20),
                  let json = try? key.open(sealed, associatedData: Array(name.utf8)),
                  let notification = try? PushNotification(json: json) else { continue }
            _ = try store(notification)
            Files.remove(queue + "/" + name)
            imported += 1
        }
        for name in (try? Files.list(directory + "/tmp")) ?? [] { Files.remove(directory + "/tmp/" + name) }
        Files.removeDirectory(directory + "/tmp")
        Files.removeDirectory(queue)  // stays if an unreadable file is left in it
        return imported
    }
}
