import AuthCLI
import Foundation

// Errors are caught inside `run`: one escaping async main would crash with a backtrace.
let status = await CommandLineInterface().run(Array(CommandLine.arguments.dropFirst()))
exit(status)
