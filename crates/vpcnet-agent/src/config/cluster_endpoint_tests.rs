use super::*;

#[test]
fn a_malformed_cluster_endpoint_never_stops_the_agent() {
    // The API client reports it (state `misconfigured`); IPAM does not depend on it.
    let vars: HashMap<String, String> = [
        (
            "CLUSTER_ENDPOINT".to_string(),
            "api.example.com".to_string(),
        ),
        (
            "MY_NODE_NAME".to_string(),
            "ip-10-0-1-5.ec2.internal".to_string(),
        ),
    ]
    .into();
    let c = Config::from_map(&vars).unwrap();
    assert_eq!(c.cluster_endpoint, "api.example.com");
    assert_eq!(c.my_node_name, "ip-10-0-1-5.ec2.internal");
}
