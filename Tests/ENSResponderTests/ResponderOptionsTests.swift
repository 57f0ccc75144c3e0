import ENSTestSupport
@testable import ENSResponder
import Testing

/// ens-fcgi's command line, as the pool starts its workers and as operators type it.
struct ResponderOptionsTests {
    @Test func theWorkersCommandLineParses() throws {
        var expected = ResponderOptions()
        expected.worker = true
        expected.slot = 3
        expected.config = "/etc/ens/ens.conf"
        #expect(try ResponderOptions.parse(["--worker", "--slot", "3", "--config", "/etc/ens/ens.conf"]) == .run(expected))
        #expect(try ResponderOptions.parse(["--worker", "--slot=3", "--config=/etc/ens/ens.conf"]) == .run(expected))
        // The pool's shared request-limit table (a memfd the worker inherits).
        expected.limitsFD = 4
        #expect(try ResponderOptions.parse(["--worker", "--slot", "3", "--config", "/etc/ens/ens.conf", "--limits-fd", "4"]) == .run(expected))
        #expect(throws: ResponderOptions.UsageError.self) { try ResponderOptions.parse(["--worker", "--limits-fd", "0"]) }
    }

    @Test func operatorsFlagsParse() throws {
        var expected = ResponderOptions()
        expected.check = true
        expected.inheritSocket = true
        #expect(try ResponderOptions.parse(["--check", "--inherit-socket"]) == .run(expected))
        #expect(try ResponderOptions.parse([]) == .run(ResponderOptions()))
        #expect(try ResponderOptions.parse(["--config", "a=b"]) == .run({ var o = ResponderOptions(); o.config = "a=b"; return o }()))
        #expect(try ResponderOptions.parse(["--check", "--help"]) == .help)
        #expect(try ResponderOptions.parse(["-h"]) == .help)
    }

    @Test(arguments: [
        (["--bogus"], "unknown option '--bogus'"),
        (["config"], "unexpected argument 'config'"),
        (["--config"], "--config needs a value"),
        (["--slot", "-1"], "--slot needs a whole number"),
        (["--slot", "x"], "--slot needs a whole number"),
        (["--check=yes"], "--check takes no value"),
        (["--check", "--check"], "--check given twice"),
        (["--config", "/a", "--config=/b"], "--config given twice"),
    ])
    func commandLinesItDoesNotTakeAreNamed(arguments: [String], message: String) {
        #expect(throws: ResponderOptions.UsageError(description: message)) { try ResponderOptions.parse(arguments) }
    }
}
