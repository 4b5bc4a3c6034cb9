//! `mrc-perf`: see `mrc_examples::perf`.

fn main() {
    std::process::exit(mrc_examples::perf::main());
}
