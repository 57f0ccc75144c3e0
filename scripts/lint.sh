#!/usr/bin/env bash
# make lint: checks a compiler does not make for us.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0

# 1. Each C module is imported by exactly one wrapper module, and nothing else.
for pair in CFastCGI:FastCGI CMariaDB:MariaDB COpenSSL:OpenSSL CCurl:Curl CLibXML2:XML; do
  module=${pair%%:*} wrapper=${pair##*:}
  offenders=$(grep -rlE "^\s*(@_implementationOnly |internal |public |private )?import $module\b" Sources Tests | grep -v "^Sources/$wrapper/" || true)
  if [ -n "$offenders" ]; then
    echo "lint: $module may only be imported by Sources/$wrapper:"; echo "$offenders"; fail=1
  fi
done

# 2. Recoverable failures throw; a state that cannot happen is a precondition that says
# what was violated. No try! or fatalError (a crash with no account of why), and no
# precondition without a message.
traps=$(grep -rnE 'fatalError\(|try!' Sources clients/ENSKit/Sources || true)
if [ -n "$traps" ]; then echo "lint: fatalError/try! in Sources (throw, or precondition with a message):"; echo "$traps"; fail=1; fi
silent=$(grep -rnP '\bprecondition(Failure)?\((?:[^(),"]|\((?:[^()]|\([^()]*\))*\))*\)' Sources clients/ENSKit/Sources || true)
if [ -n "$silent" ]; then echo "lint: a precondition without a message:"; echo "$silent"; fail=1; fi

# 2b. The module graph is Package.swift's: every import declared as a direct
# dependency, every dependency imported, docs/architecture.md's table generated from
# it; then the few rules a manifest cannot say (scripts/check_imports.py).
python3 scripts/check_manifest.py --check-doc docs/architecture.md || fail=1
python3 scripts/check_imports.py || fail=1

# 2b'. Migrations only expand; what would break the previous release is a contract
# step that names the release every host must run first.
python3 scripts/check_migrations.py || fail=1

# 2c. One place for the release: debian/changelog's newest entry is Release.version.
changelog_version=$(sed -n '1s/^ens (\([^)]*\)).*/\1/p' debian/changelog)
release_version=$(sed -n 's/^ *public static let version = "\(.*\)"$/\1/p' Sources/ENSModel/Release.swift)
if [ -z "$changelog_version" ] || [ "$changelog_version" != "$release_version" ]; then
  echo "lint: debian/changelog's newest entry ($changelog_version) is not Release.version ($release_version)"; fail=1
fi

# 3. One route table: the router, nginx's locations, the OpenAPI document and the
# OpenAPI validator's endpoint list name the same endpoints with the same methods.
python3 scripts/check_routes.py || fail=1

# 3b. The database inventory: every column a migration leaves names its protection
# (bound by a MAC, sealed, or inert and why) in Sources/ENSStore/ColumnInventory.swift.
python3 scripts/check_inventory.py || fail=1

# 3c. Every repository path in backticks and every relative link in docs/ and README.md exists.
python3 scripts/check_doc_paths.py || fail=1

# 3c'. The Swift sources keep to 150 columns, with no trailing whitespace, no tabs and one
# newline at the end (swift-format cannot check only that; scripts/check_format.py says why).
python3 scripts/check_format.py || fail=1

# 3d. No tracker numbers in the code, the tests or the docs: an issue is where work was
# asked for, not where the code's reasons live (say the reason instead). The history of
# benchmark rounds and the changelog may name them.
trackers=$(git grep -nEi '\bissues? #?[0-9]+\b|\(#[0-9]+\)' -- Sources Tests clients Fuzz scripts bench docs README.md \
  ':!docs/benchmarks-history.md' || true)
if [ -n "$trackers" ]; then echo "lint: tracker numbers (say the reason, not the issue):"; echo "$trackers"; fail=1; fi

# 4. The systemd units parse, with every directive known to this host's systemd (the
# binaries themselves need not be installed here).
if command -v systemd-analyze >/dev/null; then
  unit_problems=$(systemd-analyze verify --man=no deploy/systemd/*.service deploy/systemd/*.socket deploy/systemd/*.timer 2>&1 \
    | grep -v 'is not executable: No such file or directory' || true)
  if [ -n "$unit_problems" ]; then echo "lint: systemd units:"; echo "$unit_problems"; fail=1; fi
fi

# 5. The example config and ens.conf(5) are what the key declarations generate
# (Sources/ENSConfig/Components). The debug ens-cron prints them; it is built first when
# missing or older than the declarations (make test has just built it).
cron=.build/debug/ens-cron
if [ ! -x "$cron" ] || [ -n "$(find Sources/ENSConfig Sources/ens-cron -newer "$cron" -name '*.swift' 2>/dev/null | head -1)" ]; then
  echo "lint: building ens-cron to generate the configuration reference"
  swift build --product ens-cron >/dev/null || { echo "lint: cannot build ens-cron to check the configuration reference"; fail=1; }
fi
if [ -x "$cron" ]; then
  for pair in example:config/ens.conf.example man:debian/man/ens.conf.5; do
    flag=${pair%%:*} file=${pair#*:}
    drift=$("$cron" config-reference "--$flag" | diff -u "$file" - 2>&1 || true)
    if [ -n "$drift" ]; then
      echo "lint: $file differs from what the key declarations generate; run \`make config-docs\` and commit it:"
      echo "$drift" | head -40; fail=1
    fi
  done
fi

# 6. Shell scripts.
if command -v shellcheck >/dev/null; then
  shellcheck -S warning scripts/*.sh bench/*.sh .ci/run || fail=1
else
  echo "lint: shellcheck not installed; skipping shell checks"
fi

[ $fail -eq 0 ] && echo "lint: OK"
exit $fail
