//! Compiles the protobuf contracts with protox (pure Rust), so building the
//! workspace never needs a preinstalled `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/kruntimes/function/v1/function.proto",
        "proto/kruntimes/ownership/v1/ownership.proto",
        "proto/kruntimes/session/v1/session.proto",
        "proto/kruntimes/runtime/v1/runtime.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
