#!/usr/bin/env python3
"""A hostile IMAP server for one connection over TLS: it lets any login in, and answers
every other command with COUNT untagged lines that repeat the command's name
(`* SETMETADATA STDOUT-MARKER-<n>`) before its OK. libcurl hands such lines to its write
callback, whose default writes them to standard output; ENS's IMAP client must not.

Usage: imap_hostile.py CERT KEY PORT_FILE COUNT
Listens on 127.0.0.1 (a free port, written to PORT_FILE), serves one connection, exits.
"""
import os
import socket
import ssl
import sys


def main() -> None:
    cert, key, port_file, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(30)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    connection, _ = listener.accept()
    stream = context.wrap_socket(connection, server_side=True).makefile("rwb")
    stream.write(b"* OK hostile IMAP ready\r\n")
    stream.flush()
    for raw in stream:
        tag, _, rest = raw.decode("ascii", "replace").strip().partition(" ")
        words = rest.split(" ")
        command = words[0].upper()
        if command == "CAPABILITY":
            stream.write(b"* CAPABILITY IMAP4rev1 SASL-IR AUTH=PLAIN\r\n" + f"{tag} OK done\r\n".encode())
        elif command in ("AUTHENTICATE", "LOGIN"):
            if command == "AUTHENTICATE" and len(words) < 3:
                stream.write(b"+ \r\n")
                stream.flush()
                stream.readline()
            stream.write(f"{tag} OK logged in\r\n".encode())
        elif command == "LOGOUT":
            stream.write(b"* BYE\r\n" + f"{tag} OK bye\r\n".encode())
            stream.flush()
            break
        else:
            for index in range(count):
                stream.write(f"* {command} STDOUT-MARKER-{index}\r\n".encode())
            stream.write(f"{tag} OK done\r\n".encode())
        stream.flush()


if __name__ == "__main__":
    main()
