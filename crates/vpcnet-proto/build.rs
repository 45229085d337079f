fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "../../proto/vpcnet/cni/v1/backend.proto",
        "../../proto/aws/rpc/network_policy.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure().compile_protos(&protos, &["../../proto"])?;
    Ok(())
}
