fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/vpcnet/cni/v1/backend.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure().compile_protos(&[proto], &["../../proto"])?;
    Ok(())
}
