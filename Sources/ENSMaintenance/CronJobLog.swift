internal import POSIX
public import ENSModel

/// The last run of each ens-cron job, kept in a small file (`cron.status_file`) so that
/// `ens-cron status` can say when each job last ran and how it went without reading
/// logs. One line per job: `<job> <outcome> <finished, ms since epoch> <took, ms>`;
/// written atomically, so a reader never sees half of it. Lines it cannot read are
/// skipped: the file is a convenience, never a reason for a job to fail.
public struct CronJobLog: Sendable {
    public struct Entry: Sendable, Equatable {
        public let job: String
        /// "ok", or "failed" (the error itself is in the journal, not here: it may
        /// name a host or a database message).
        public let outcome: String
        public let finishedAt: Timestamp
        public let took: Duration

        public init(job: String, outcome: String, finishedAt: Timestamp, took: Duration) {
            self.job = job
            self.outcome = outcome
            self.finishedAt = finishedAt
            self.took = took
        }
    }

    public let path: String

    public init(path: String) {
        self.path = path
    }

    /// Every job's last run, by job name.
    public func read() -> [String: Entry] {
        guard let bytes = try? Files.read(path, limit: 64 * 1024), let text = String(validating: bytes, as: UTF8.self) else { return [:] }
        var entries: [String: Entry] = [:]
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count == 4, fields[0].allSatisfy({ $0.isLetter || $0 == "-" }), fields[0].count <= 32,
                  fields[1] == "ok" || fields[1] == "failed",
                  let finished = Int64(fields[2]), let took = Int64(fields[3]), took >= 0 else { continue }
            entries[String(fields[0])] = Entry(job: String(fields[0]), outcome: String(fields[1]),
                                               finishedAt: Timestamp(millisecondsSinceEpoch: finished), took: .milliseconds(took))
        }
        return entries
    }

    /// Records a job's run, keeping the others' lines.
    public func record(_ entry: Entry) throws {
        var entries = read()
        entries[entry.job] = entry
        let text = entries.keys.sorted().compactMap { entries[$0] }.map {
            "\($0.job) \($0.outcome) \($0.finishedAt.millisecondsSinceEpoch) \($0.took.wholeMilliseconds)\n"
        }.joined()
        try Files.writeAtomically(Array(text.utf8), to: path, mode: 0o644)
    }
}
