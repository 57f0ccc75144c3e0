import ENSTestSupport
import Foundation
@testable import POSIX
import Testing

/// ENS's SRV reader against dnslib (Python), an independent DNS implementation: dnslib
/// writes the replies (with its own name compression) and reads ENS's queries; the
/// resolver asks Tests/tools/dns_simulator.py over real UDP on loopback.
@Suite struct DNSTests {
    /// A reply dnslib packs for `name`: `records` as (priority, weight, port, target), or
    /// a header change ("rcode=3", "tc=1", "id=N").
    static func dnslibReply(id: UInt16, name: String, records: [(Int, Int, Int, String)] = [], change: String = "") throws -> [UInt8] {
        let list = records.map { "(\($0.0), \($0.1), \($0.2), '\($0.3)')" }.joined(separator: ", ")
        let hex = try Shell.python("""
        import sys
        from dnslib import DNSRecord, DNSHeader, DNSQuestion, RR, QTYPE, SRV
        q = DNSQuestion(sys.argv[2], QTYPE.SRV)
        r = DNSRecord(DNSHeader(id=int(sys.argv[1]), qr=1, aa=1, ra=1), q=q)
        for p, w, port, t in [\(list)]:
            r.add_answer(RR(sys.argv[2], QTYPE.SRV, ttl=60, rdata=SRV(p, w, port, t)))
        r.add_answer(RR(sys.argv[2], QTYPE.TXT, ttl=60, rdata=__import__('dnslib').TXT('not srv')))
        for change in filter(None, sys.argv[3].split(',')):
            field, value = change.split('=')
            setattr(r.header, field, int(value))
        print(r.pack().hex())
        """, ["\(id)", name, change])
        return hexBytes(hex)
    }

    static func hexBytes(_ hex: String) -> [UInt8] {
        var bytes: [UInt8] = [], index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }

    @Test func dnslibReadsTheQuery() throws {
        let query = try DNSMessage.query(id: 4242, name: "_imaps._tcp.Example.TEST.", type: DNSMessage.typeSRV)
        let read = try Shell.python("""
        import sys
        from dnslib import DNSRecord, QTYPE
        q = DNSRecord.parse(bytes.fromhex(sys.argv[1]))
        print(q.header.id, q.header.rd, q.header.qr, QTYPE[q.q.qtype], q.q.qclass, str(q.q.qname), len(q.questions))
        """, [query.map { String(format: "%02x", $0) }.joined()])
        #expect(read == "4242 1 0 SRV 1 _imaps._tcp.Example.TEST. 1")
    }

    @Test func srvRecordsAsDnslibWritesThem() throws {
        let name = "_imaps._tcp.hosted.test"
        let reply = try Self.dnslibReply(id: 7, name: name, records: [(10, 5, 993, "imap.hosted.test."), (0, 1, 9993, "mail.Provider.example.")])
        let records = try DNSMessage.srvAnswers(reply, id: 7, name: "_IMAPS._tcp.hosted.test.")
        #expect(records == [
            SRVRecord(priority: 10, weight: 5, port: 993, target: "imap.hosted.test"),
            SRVRecord(priority: 0, weight: 1, port: 9993, target: "mail.provider.example"),
        ])
        // "." says the service is not offered.
        let none = try Self.dnslibReply(id: 8, name: name, records: [(0, 0, 0, ".")])
        #expect(try DNSMessage.srvAnswers(none, id: 8, name: name) == [SRVRecord(priority: 0, weight: 0, port: 0, target: "")])
    }

    @Test func headerOutcomes() throws {
        let name = "_imap._tcp.hosted.test"
        #expect(try DNSMessage.srvAnswers(try Self.dnslibReply(id: 1, name: name, change: "rcode=3"), id: 1, name: name) == [])
        let refusals: [(String, DNSError.Kind)] = [
            ("rcode=2", .serverFailure(rcode: 2)), ("rcode=5", .serverFailure(rcode: 5)), ("tc=1", .truncated), ("qr=0", .malformed),
        ]
        for (change, kind) in refusals {
            #expect(throws: DNSError.self, "\(change)") {
                do {
                    _ = try DNSMessage.srvAnswers(try Self.dnslibReply(id: 1, name: name, change: change), id: 1, name: name)
                } catch let error as DNSError {
                    #expect(error.kind == kind, "\(change)")
                    throw error
                }
            }
        }
        // A reply to another query, or to another question, is not this one's answer.
        let reply = try Self.dnslibReply(id: 9, name: name, records: [(0, 0, 993, "a.test.")])
        #expect(throws: DNSError.self) { try DNSMessage.srvAnswers(reply, id: 10, name: name) }
        #expect(throws: DNSError.self) { try DNSMessage.srvAnswers(reply, id: 9, name: "_imaps._tcp.hosted.test") }
    }

    @Test func namesThatCannotBeAsked() {
        for name in ["", ".", "a..b", String(repeating: "x", count: 64) + ".test", "sp ace.test", "ümlaut.test",
                     (0..<64).map { _ in "abc" }.joined(separator: ".")] {
            #expect(throws: DNSError.self, "\(name)") { try DNSMessage.query(id: 1, name: name, type: DNSMessage.typeSRV) }
        }
    }

    /// Compression pointers that point at themselves or forward would loop or read ahead.
    @Test func pointersMustPointBack() {
        let header: [UInt8] = [0, 1, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0]
        for name in [[0xC0, 12] as [UInt8], [0xC0, 14, 0], [1, 0x61, 0xC0, 12], [0x80, 1]] {
            #expect(throws: DNSError.self) { try DNSMessage.srvAnswers(header + name + [0, 33, 0, 1], id: 1, name: "a") }
        }
    }

    /// Every cut and every byte changed in a real reply is answered or refused, never a
    /// crash or a read past the end.
    @Test func damagedRepliesAreRefusedOrRead() throws {
        let name = "_imaps._tcp.hosted.test"
        let reply = try Self.dnslibReply(id: 3, name: name, records: [(0, 1, 993, "imap.hosted.test."), (5, 1, 143, "imap2.hosted.test.")])
        for length in 0..<reply.count {
            #expect(throws: DNSError.self) { try DNSMessage.srvAnswers(Array(reply.prefix(length)), id: 3, name: name) }
        }
        var random = SeededGenerator(seed: 53)
        for _ in 0..<5000 {
            var damaged = reply
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                damaged[Int.random(in: 0..<damaged.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            _ = try? DNSMessage.srvAnswers(damaged, id: 3, name: name)
        }
    }

    @Test func resolvConfNameservers() throws {
        let servers = DNSResolver.nameservers(inResolvConf: """
        # generated
        search example.test
        nameserver 192.0.2.53
        nameserver\t2001:db8::35
        nameserver fe80::1%eth0
        options ndots:2
        """)
        #expect(servers == [DNSResolver.Nameserver(address: IPAddress("192.0.2.53")!), DNSResolver.Nameserver(address: IPAddress("2001:db8::35")!)])
        // resolv.conf(5): no file, or no nameserver line, means this machine's; a file
        // that cannot be read is said at every lookup.
        try withTemporaryDirectory { directory in
            let loopback = [DNSResolver.Nameserver(address: IPAddress("127.0.0.1")!)]
            #expect(DNSResolver.system(path: directory.path + "/absent").nameservers == loopback)
            let empty = directory.appendingPathComponent("resolv.conf")
            try empty.write("search example.test\n")
            #expect(DNSResolver.system(path: empty.path).nameservers == loopback)
            let unreadable = DNSResolver.system(path: directory.path)  // a directory: EISDIR
            #expect(unreadable.nameservers.isEmpty)
            do throws(DNSError) {
                _ = try unreadable.srv("_imaps._tcp.hosted.test")
                Issue.record("a lookup without a readable configuration answered")
            } catch {
                #expect(error.kind == .unavailable && error.detail.hasPrefix(directory.path), "\(error)")
            }
        }
        #expect(DNSResolver.Nameserver("127.0.0.1:5353")?.port == 5353)
        #expect(DNSResolver.Nameserver("[::1]:5353")?.port == 5353)
        #expect(DNSResolver.Nameserver("::1")?.port == 53)
        #expect(DNSResolver.Nameserver("localhost:53") == nil)
        #expect(DNSResolver.Nameserver("127.0.0.1:0") == nil)
    }

    @Test func resolverOverUDP() throws {
        try withTemporaryDirectory { directory in
            let zone = directory.appendingPathComponent("zone.json")
            try zone.write("""
            {"_imaps._tcp.hosted.test": [[10, 1, 993, "imap.hosted.test."]],
             "_imaps._tcp.failing.test": "servfail", "_imaps._tcp.garbage.test": "garbage",
             "_imaps._tcp.silent.test": "silent"}
            """)
            let simulator = try DNSSimulator(zone: zone)
            defer { simulator.stop() }
            let here = DNSResolver.Nameserver(address: IPAddress("127.0.0.1")!, port: simulator.port)
            let resolver = DNSResolver(nameservers: [here], timeout: .milliseconds(400))
            #expect(try resolver.srv("_imaps._tcp.hosted.test") == [SRVRecord(priority: 10, weight: 1, port: 993, target: "imap.hosted.test")])
            #expect(try resolver.srv("_imaps._tcp.absent.test") == [])
            func kind(_ name: String, _ resolver: DNSResolver) -> DNSError.Kind? {
                do { _ = try resolver.srv(name); return nil } catch { return error.kind }
            }
            #expect(kind("_imaps._tcp.failing.test", resolver) == .serverFailure(rcode: 2))
            // Random bytes are not a reply: the resolver waits for one until its time is up.
            #expect(kind("_imaps._tcp.garbage.test", resolver) == .timeout)
            #expect(kind("_imaps._tcp.silent.test", resolver) == .timeout)
            // Nothing listening (ICMP port unreachable on loopback): the next server answers.
            let closed = DNSResolver.Nameserver(address: IPAddress("127.0.0.1")!, port: try Self.unusedUDPPort())
            #expect(kind("_imaps._tcp.hosted.test", DNSResolver(nameservers: [closed], timeout: .milliseconds(400))) == .unavailable)
            #expect(try DNSResolver(nameservers: [closed, here], timeout: .milliseconds(400)).srv("_imaps._tcp.hosted.test").count == 1)
            #expect(kind("_imaps._tcp.hosted.test", DNSResolver(nameservers: [])) == .unavailable)
        }
    }

    static func unusedUDPPort() throws -> UInt16 {
        UInt16(try Shell.python("""
        import socket
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])
        """))!
    }
}

/// Tests/tools/dns_simulator.py on a loopback port the kernel picks; it ends when its
/// standard input closes.
final class DNSSimulator {
    let process = Process()
    let input = Pipe()
    let port: UInt16

    init(zone: URL) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("tools/dns_simulator.py")
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path, "--zone", zone.path, "--until-eof"]
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = input
        try process.run()
        let line = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        guard line.hasPrefix("listening "), let port = UInt16(line.dropFirst(10).prefix { $0.isNumber }) else {
            try? input.fileHandleForWriting.close()
            throw TestFailure.command(status: 1, script: "dns_simulator.py did not say its port: \(line)")
        }
        self.port = port
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}
