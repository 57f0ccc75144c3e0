extension ConfigSection {
    static let maintenance = ConfigSection("Maintenance (ens-cron)", keys: [
        ConfigKey("subscription.grace_seconds", \.subscriptionGrace, .duration(0...86400, .seconds), default: "300",
                  doc: "Grace period, in seconds, past a subscription's status frequency (the interval at which Exchange promises a callback) before the subscription counts as unhealthy.",
                  details: """
                  /getsubscriptionstatus then answers UserRecordPresentNotSubscribed and the
                  device registers again. Raise it if slow Exchange servers cause needless
                  re-registrations.
                  """),
        ConfigKey("cron.lock_file", \.lockFile, .path, default: "/run/ens/ens-cron.lock",
                  doc: "Lock file that keeps two ens-cron runs from overlapping: a run that finds it held logs that it skipped and exits 0."),
        ConfigKey("cron.lease_seconds", \.cronLease, .duration(30...86400, .seconds), default: "300",
                  doc: "The shared jobs (reap, renew, sync-keys, keys) run on one host at a time across every host using this database: each run claims a lease in the database (table CronLeases) and renews it every third of this many seconds while it works.",
                  details: """
                  A host that crashes mid-run holds it until it expires; then the next
                  minute's run on any host takes over. api-keys (this host's token cache)
                  runs on every host regardless.
                  """),
        ConfigKey("cron.status_file", \.cronStatusFile, .path, default: "/var/lib/ens/cron-status",
                  doc: "When each ens-cron job last ran and whether it succeeded (for `ens-cron status`): one line per job, rewritten after each job.",
                  details: """
                  Writable by the ens user.
                  """),
        ConfigKey("reap.device_days", \.deviceRetention, .duration(1...3650, .days), default: "30",
                  doc: "ens-cron reap: devices that have not checked in for this many days are removed."),
        ConfigKey("reap.disabled_days", \.disabledRetention, .duration(0...3650, .days), default: "7",
                  doc: "ens-cron reap: device tokens APNs rejected are removed this many days after."),
        ConfigKey("reap.empty_record_days", \.emptyRecordRetention, .duration(0...3650, .days), default: "7",
                  doc: "ens-cron reap: a user record with no devices is removed this many days after its last activity (so a record fresh from /getpublickey survives until it registers)."),
        ConfigKey("renew.wakeup_interval_minutes", \.wakeupInterval, .duration(1...10080, .minutes), default: "360",
                  doc: "ens-cron renew: at most one silent wake-up push per device per this many minutes."),
    ])
}
