/// The release this build is: what `--version` prints and what each host's sender
/// records in SenderHosts (`ens-cron status` lists every host's). The one place for it
/// is debian/changelog's newest entry, which also says what the release's migrations
/// expand and contract; `make lint` fails when this differs from it.
public enum Release {
    public static let version = "0.6.0"
}
