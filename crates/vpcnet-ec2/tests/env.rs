//! Client construction "the standard SDK way", from the environment only: endpoint from
//! `AWS_ENDPOINT_URL_EC2`, credentials from `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, region
//! from IMDS found through `AWS_EC2_METADATA_SERVICE_ENDPOINT`. One test in its own binary,
//! because it sets process environment variables.

use vpcnet_ec2::{Ec2, Ec2Options};
use vpcnet_emu::{Emulator, RunInstance};
use vpcnet_imds::Imds;

#[tokio::test]
async fn endpoint_credentials_and_region_come_from_the_environment() {
    let emu = Emulator::new(3);
    let vpc = emu.create_vpc("10.1.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "10.1.0.0/24".parse().unwrap(), "us-east-1b")
        .unwrap();
    let inst = emu
        .run_instance(RunInstance {
            instance_type: "t3.medium".into(),
            subnet_id: subnet,
            ..Default::default()
        })
        .await
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let imds_url = emu.imds_endpoint(&inst.instance_id).await.unwrap();

    for var in [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
    ] {
        std::env::remove_var(var);
    }
    std::env::set_var("AWS_CONFIG_FILE", "/nonexistent/vpcnet-test-config");
    std::env::set_var(
        "AWS_SHARED_CREDENTIALS_FILE",
        "/nonexistent/vpcnet-test-credentials",
    );
    std::env::set_var("AWS_ENDPOINT_URL_EC2", &server.endpoint);
    std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDENV");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "secret");
    std::env::set_var("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds_url);

    let ec2 = Ec2::connect_unobserved(Ec2Options::default())
        .await
        .unwrap();
    assert_eq!(ec2.region(), "us-east-1");
    let i = ec2.describe_instance(&inst.instance_id).await.unwrap();
    assert_eq!(
        (i.instance_type.as_str(), i.availability_zone.as_str()),
        ("t3.medium", "us-east-1b")
    );
    assert_eq!(
        emu.calls().per_action.get("DescribeInstances").copied(),
        Some(1)
    );

    let imds = Imds::new();
    assert_eq!(imds.instance_id().await.unwrap(), inst.instance_id);
}
