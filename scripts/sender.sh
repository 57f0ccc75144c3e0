# shellcheck shell=bash
# The push sender's name, for the scripts that start it or look for it: sourced, not run
# (by scripts/common.sh, and so stack.sh and cluster.sh; by rolling-upgrade.sh, chaos.sh,
# cluster-chaos.sh and bench/lib.sh).
#
# The sender is ens-sender from release 0.4.0 on. Up to 0.3.0 it was ens-apns, and a
# directory of binaries from such a release has only that one: bench/ab-callbacks.sh's
# AB_BIN_A may be one, to compare with an old build (0.4.0's package linked the old name
# to ens-sender; 0.5.0 dropped the link).

# sender_bin DIR: the sender in the directory of binaries DIR: DIR/ens-sender, else the
# ens-apns of an older release; DIR/ens-sender when neither is there (for the message
# that says it is missing).
sender_bin() {
  if [ ! -x "$1/ens-sender" ] && [ -x "$1/ens-apns" ]; then echo "$1/ens-apns"; else echo "$1/ens-sender"; fi
}

# sender_product TREE: the sender's product in the source tree TREE (its Package.swift):
# ens-sender, or ens-apns in a tree of an older release.
sender_product() {
  if grep -q '\.executable(name: "ens-sender"' "$1/Package.swift" 2>/dev/null; then echo ens-sender; else echo ens-apns; fi
}

# SENDER_PROCESS: an extended regular expression (pgrep -f) for the sender's program in
# a command line, either name: a stack or host may run an older release's ens-apns.
# shellcheck disable=SC2034  # read by the sourcing script
SENDER_PROCESS='ens-(sender|apns)'
