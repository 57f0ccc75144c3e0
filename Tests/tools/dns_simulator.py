#!/usr/bin/env python3
"""A DNS server for tests, on UDP loopback, written with dnslib (an implementation
independent of ENS's own DNS reader). It answers SRV questions from a zone file that it
reads again for every query, so a test changes an answer by rewriting the file:

  {"_imaps._tcp.hosted.test": [[0, 1, 993, "localhost."]],
   "_imap._tcp.broken.test": "servfail" | "refused" | "garbage" | "truncated" | "silent"}

A list is the SRV records (priority, weight, port, target); a name not in the file gets
NXDOMAIN. The modes: servfail/refused answer that rcode; garbage sends random bytes;
truncated sets TC; silent never answers. Records are written as dnslib writes them,
with names compressed where it can.

  dns_simulator.py --zone FILE [--port N] [--host 127.0.0.1] [--until-eof] [--ready-file F]

Prints "listening PORT" once bound (port 0: the kernel's choice). --until-eof: exits when
its standard input closes (a test's pipe), so it cannot outlive the test. --ready-file:
its pid is written there once it listens (scripts/stack.sh waits for it).
"""
import argparse
import json
import os
import socket
import sys
import threading

from dnslib import DNSRecord, DNSHeader, RR, QTYPE, RCODE, SRV


def answer(query, zone):
    name = str(query.q.qname).rstrip(".").lower()
    entry = zone.get(name)
    reply = DNSRecord(DNSHeader(id=query.header.id, qr=1, aa=1, ra=1, rd=query.header.rd), q=query.q)
    if entry is None or query.q.qtype != QTYPE.SRV:
        if entry is None:
            reply.header.rcode = RCODE.NXDOMAIN
        return [reply.pack()]
    if entry == "servfail":
        reply.header.rcode = RCODE.SERVFAIL
        return [reply.pack()]
    if entry == "refused":
        reply.header.rcode = RCODE.REFUSED
        return [reply.pack()]
    if entry == "garbage":
        return [os.urandom(64)]
    if entry == "truncated":
        reply.header.tc = 1
        return [reply.pack()]
    if entry == "silent":
        return []
    for priority, weight, port, target in entry:
        reply.add_answer(RR(query.q.qname, QTYPE.SRV, ttl=60, rdata=SRV(priority, weight, port, target)))
    return [reply.pack()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--zone", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--until-eof", action="store_true")
    parser.add_argument("--ready-file")
    args = parser.parse_args()
    if args.until_eof:
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((args.host, args.port))
    print(f"listening {sock.getsockname()[1]}", flush=True)
    if args.ready_file:
        with open(args.ready_file + ".tmp", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.rename(args.ready_file + ".tmp", args.ready_file)
    while True:
        data, peer = sock.recvfrom(4096)
        try:
            query = DNSRecord.parse(data)
        except Exception:  # not DNS: a real server drops it too
            continue
        try:
            with open(args.zone) as f:
                zone = {k.lower(): v for k, v in json.load(f).items()}
        except (OSError, ValueError):
            zone = {}
        for packet in answer(query, zone):
            sock.sendto(packet, peer)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
