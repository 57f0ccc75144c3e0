#!/usr/bin/env python3
"""One round of B2's Apache ceiling (bench/b1b2-fronts.sh, b2_ceiling).

Arguments: B2 through nginx and Apache's floor, each as cpu_split prints it
("requests fcgi-ticks mariadb-ticks nginx-ticks apache-ticks wrk-seconds"), then
CLK_TCK, the seconds of each run and the round's number. Prints the round's figures on
standard error and the ceiling, (X + nginx) / (X + Apache's floor) with X the check-in's
ens-fcgi, MariaDB and wrk CPU, on standard output.
"""
import os
import sys

b2, floor = ([float(x) for x in arg.split()] for arg in sys.argv[1:3])
hz, seconds, round_number = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if b2[0] <= 0 or floor[0] <= 0:
    sys.exit(f"fronts-ceiling: a run answered no request; see {os.environ.get('ENS_VAR', 'ENS_VAR')}/fronts-errors.txt")


def ms(ticks, requests):
    return ticks * 1000 / hz / requests


fcgi, mariadb, nginx = ms(b2[1], b2[0]), ms(b2[2], b2[0]), ms(b2[3], b2[0])
wrk = b2[5] * 1000 / b2[0]
apache = ms(floor[4], floor[0])
others = fcgi + mariadb + wrk
ceiling = (others + nginx) / (others + apache)
print(f"B2 Apache ceiling round {round_number}: through nginx {b2[0] / seconds:.0f} check-ins/s, CPU ms each: "
      f"ens-fcgi {fcgi:.3f}, MariaDB {mariadb:.3f}, wrk {wrk:.3f}, nginx {nginx:.3f}; "
      f"Apache's floor at {floor[0] / seconds:.0f} req/s: {apache:.3f} ms; ceiling {ceiling:.3f}", file=sys.stderr)
print(f"{ceiling:.3f}")
