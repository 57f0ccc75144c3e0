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
        // Versions that wrote `tmp/` may have left it, or not; one that is there but
        // cannot be listed is an error of the host's, said as the spool opens.
        let tmp = directory + "/tmp"
        if Files.exists(tmp) {
            for name in try Files.list(tmp) { Files.remove(tmp + "/" + name) }
            Files.removeDirectory(tmp)
        }
        Files.removeDirectory(queue)  // stays if an unreadable file is left in it
        return imported
    }
}
