// The AWS node agent's side of its contract with the IPAM daemon and the CNI plugin, built
// from the VPC CNI's generated gRPC package (github.com/aws/amazon-vpc-cni-k8s/rpc, which
// aws-network-policy-agent itself imports), for vpcnet's contract tests: see main.go and
// scripts/build-npa-contract.sh.
module vpcnet.lab/npa-contract

go 1.26.6

require (
	github.com/aws/amazon-vpc-cni-k8s v1.23.2
	google.golang.org/grpc v1.83.2
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
)
