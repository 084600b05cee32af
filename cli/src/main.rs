//! The `ibp` command line: analyze, compress, decompress, inspect, bench.

mod cli;

fn main() {
    std::process::exit(cli::run());
}
