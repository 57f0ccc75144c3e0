import ENSTestSupport
import Foundation
import Glibc
@testable import POSIX
import Testing

/// A listening socket gets exactly the mode asked for, whatever the umask, without
/// touching the process's umask, which every thread shares: a test process binding one
/// made other threads' new directories 0600.
@Suite(.serialized) struct UnixSocketTests {
    @Test(arguments: [UInt32(0o600), 0o660, 0o666])
    func theSocketFileHasTheModeAskedForAndTheUmaskIsUntouched(mode: UInt32) throws {
        try withTemporaryDirectory { directory in
            let path = directory.path + "/test.sock"
            let previous = umask(0o022)
            defer { umask(previous) }
            let (fd, _) = try UnixSocket.listen(path: path, mode: mode, backlog: 4)
            defer { close(fd) }
            var info = stat()
            #expect(stat(path, &info) == 0)
            #expect(UInt32(info.st_mode) & 0o777 == mode)
            let current = umask(0o022)
            #expect(current == 0o022, "listen changed the process's umask")
        }
    }
}
