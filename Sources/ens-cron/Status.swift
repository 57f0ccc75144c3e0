internal import ENSConfig
import ArgumentParser
import ENSSender
import Logging
import POSIX
internal import ENSMaintenance
internal import ENSStore

/// `ens-cron status`: how healthy is this ENS, for a person or (`--json`) a script.
/// Reads only: the database (counts), the spool's files and the cron status file.
struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show subscriptions by backend and health, devices by app and state, the spool, the cron jobs' last runs, API tokens and the key " +
                  "pool.",
        discussion: "Counts only: no user, address, token or URL is shown. Exit status 0, or 1 when the database cannot be read."
    )
    @OptionGroup var options: CommonOptions
    @Flag(name: .long, help: "One JSON object instead of text.") var json = false

    func run() throws {
        let settings = try options.load("status")
        try reportingFailures("status") {
            let database = Databases.connection(try settings.serviceDatabase())
            var report = try StatusReport.gather(database: database, configuration: settings, now: options.clock)
            do {
                report.spool = try Spool.inspect(directory: settings.push.spoolDirectory)
            } catch {
                // ens-cron may not be allowed to read the spool (it is ens-sender's): say so, go on.
                report.spoolProblem = "\(settings.push.spoolDirectory): \(error)"
            }
            report.cronJobs = CronJobLog(path: settings.maintenance.cronStatusFile).read().values.sorted { $0.job < $1.job }
            if json {
                try FileDescriptor.writeAll(1, report.json())
            } else {
                print(report.text(), terminator: "")
            }
        }
    }
}
