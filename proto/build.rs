//! Compiles the protobuf contracts with protox (pure Rust), so building the
//! workspace never needs a preinstalled `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/kruntimes/runtime/v1/runtime.proto",
        "proto/kruntimes/agent/v1/agent.proto",
        "proto/kruntimes/ownership/v1/ownership.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
