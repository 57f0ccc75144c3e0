internal import ENSConfig
import ArgumentParser
import ENSConfig

/// Prints the configuration reference generated from the key declarations
/// (Sources/ENSConfig/Components): `make config-docs` writes config/ens.conf.example and
/// debian/man/ens.conf.5 with it, and `make lint` compares them. Reads no config file.
struct ConfigReferenceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config-reference",
        abstract: "Print the example config file (--example) or ens.conf(5) (--man), generated from the key declarations.",
        shouldDisplay: false
    )

    @Flag(name: .long, help: "The example file (config/ens.conf.example).")
    var example = false

    @Flag(name: .long, help: "The man page, ens.conf(5), in roff.")
    var man = false

    func validate() throws {
        guard example != man else { throw ValidationError("give one of --example and --man") }
    }

    func run() {
        print(example ? ConfigReference.example() : ConfigReference.manPage(), terminator: "")
    }
}
