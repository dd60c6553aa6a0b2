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
    // prost derives `Eq` only for messages without repeated message fields;
    // these hold only `Eq` fields (the gateway compares table entries).
    tonic_prost_build::configure()
        .message_attribute(".kruntimes.ownership.v1.ExportOutcome", "#[derive(Eq)]")
        .message_attribute(".kruntimes.ownership.v1.OwnershipEntry", "#[derive(Eq)]")
        .compile_fds(fds)?;
    Ok(())
}
