internal import POSIX



/// ens-cron: its lock and lease, the reaper's retention and the renewal wake-ups.
public struct MaintenanceSettings: SettingsComponent {
    public var lockFile = "/run/ens/ens-cron.lock"
    /// How long the cluster-wide cron lease lasts without renewal (a crashed holder's
    /// jobs start elsewhere at most this long after it died).
    public var cronLease: Duration = .seconds(300)
    /// Each cron job's last run, for `ens-cron status` (see `CronJobLog`).
    public var cronStatusFile = "/var/lib/ens/cron-status"
    public var deviceRetention: Duration = .days(30)
    public var disabledRetention: Duration = .days(7)
    public var emptyRecordRetention: Duration = .days(7)
    public var wakeupInterval: Duration = .minutes(360)

    public init() {}

    public static let configuration: any WritableKeyPath<ENSConfiguration, MaintenanceSettings> & Sendable = \.maintenance

    public static let section = ConfigSection("Maintenance (ens-cron)", keys: [
        key("cron.lock_file", \.lockFile, .path,
            doc: "Lock file that keeps two ens-cron runs from overlapping: a run that finds it held logs that it skipped and exits 0."),
        key("cron.lease_seconds", \.cronLease, .duration(30...86400, .seconds),
            doc: "The shared jobs (reap, renew, sync-keys, keys) run on one host at a time across every host using this database: each run claims " +
                 "a lease in the database (table CronLeases) and renews it every third of this many seconds while it works.",
            details: """
            A host that crashes mid-run holds it until it expires; then the next
            minute's run on any host takes over. api-keys (this host's token cache)
            runs on every host regardless.
            """),
        key("cron.status_file", \.cronStatusFile, .path,
            doc: "When each ens-cron job last ran and whether it succeeded (for `ens-cron status`): one line per job, rewritten after each job.",
            details: """
            Writable by the ens user.
            """),
        key("reap.device_days", \.deviceRetention, .duration(1...3650, .days),
            doc: "ens-cron reap: devices that have not checked in for this many days are removed."),
        key("reap.disabled_days", \.disabledRetention, .duration(0...3650, .days),
            doc: "ens-cron reap: device tokens APNs rejected are removed this many days after."),
        key("reap.empty_record_days", \.emptyRecordRetention, .duration(0...3650, .days),
            doc: "ens-cron reap: a user record with no devices is removed this many days after its last activity (so a record fresh from " +
                 "/getpublickey survives until it registers)."),
        key("renew.wakeup_interval_minutes", \.wakeupInterval, .duration(1...10080, .minutes),
            doc: "ens-cron renew: at most one silent wake-up push per device per this many minutes."),
    ])
}
