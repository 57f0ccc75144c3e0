import Foundation

/// A simulator's record of what it accepted: one JSON object per line, only ever appended
/// to while the simulator runs (a restart may start a new file). Read incrementally: each
/// call parses only the lines written since the last one. By the end of a full run the
/// APNs record holds some 40,000 pushes (23 MB), and every `pushes(to:)` poll of a test
/// used to parse all of them again.
final class JSONLinesRecord<Entry>: @unchecked Sendable {
    // @unchecked: every field below `path` and `parse` is read and written under `lock`.
    private let path: () -> String
    private let parse: ([String: Any]) -> Entry?
    private let lock = NSLock()
    private var file: (path: String, inode: UInt64)?
    private var offset: UInt64 = 0
    private var entries: [Entry] = []

    init(path: @escaping () -> String, parse: @escaping ([String: Any]) -> Entry?) {
        self.path = path
        self.parse = parse
    }

    /// Every entry in the file now, in the order written.
    func all() -> [Entry] {
        lock.lock()
        defer { lock.unlock() }
        let path = path()
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              let inode = (attributes[.systemFileNumber] as? NSNumber)?.uint64Value,
              let size = (attributes[.size] as? NSNumber)?.uint64Value else {
            return []  // not written yet
        }
        // Another file, or this one started again: read it from the start.
        if file?.path != path || file?.inode != inode || size < offset {
            file = (path, inode)
            offset = 0
            entries = []
        }
        guard size > offset, let handle = FileHandle(forReadingAtPath: path) else { return entries }
        defer { try? handle.close() }
        guard (try? handle.seek(toOffset: offset)) != nil, let data = try? handle.readToEnd(), !data.isEmpty else { return entries }
        // Only whole lines: one being written now is read next time.
        guard let lastNewline = data.lastIndex(of: UInt8(ascii: "\n")) else { return entries }
        let complete = data[data.startIndex...lastNewline]
        offset += UInt64(complete.count)
        for line in complete.split(separator: UInt8(ascii: "\n")) where !line.isEmpty {
            if let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any], let entry = parse(object) {
                entries.append(entry)
            }
        }
        return entries
    }
}
