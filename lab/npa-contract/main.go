// npa-contract stands in for the AWS network policy agent (aws-eks-nodeagent) at its two gRPC
// edges, with the VPC CNI's own generated code (package rpc of amazon-vpc-cni-k8s, the one the
// node agent imports), so that vpcnet's side of the contract is checked against upstream's
// wire definitions rather than against vpcnet's own .proto.
//
//	npa-contract serve -socket /var/run/aws-node/npa.sock -record calls.jsonl [-fail]
//	    serves rpc.NPBackend; every call is appended to -record as one JSON line;
//	    -fail answers Success=false.
//	npa-contract config -socket /var/run/aws-node/ipamd.sock
//	    calls rpc.ConfigServerBackend/GetNetworkPolicyConfigs as the node agent does at start
//	    and prints the reply as one JSON line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/aws/amazon-vpc-cni-k8s/rpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
)

type recorder struct {
	mu   sync.Mutex
	path string
	fail bool
}

func (r *recorder) record(v map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line, _ := json.Marshal(v)
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "npa-contract: %v\n", err)
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
}

type npBackend struct {
	rpc.UnimplementedNPBackendServer
	rec *recorder
}

func (s *npBackend) EnforceNpToPod(_ context.Context, in *rpc.EnforceNpRequest) (*rpc.EnforceNpReply, error) {
	s.rec.record(map[string]any{
		"call":                "EnforceNpToPod",
		"K8S_POD_NAME":        in.K8S_POD_NAME,
		"K8S_POD_NAMESPACE":   in.K8S_POD_NAMESPACE,
		"NETWORK_POLICY_MODE": in.NETWORK_POLICY_MODE,
		"InterfaceCount":      in.InterfaceCount,
	})
	return &rpc.EnforceNpReply{Success: !s.rec.fail}, nil
}

func (s *npBackend) DeletePodNp(_ context.Context, in *rpc.DeleteNpRequest) (*rpc.DeleteNpReply, error) {
	s.rec.record(map[string]any{
		"call":              "DeletePodNp",
		"K8S_POD_NAME":      in.K8S_POD_NAME,
		"K8S_POD_NAMESPACE": in.K8S_POD_NAMESPACE,
	})
	return &rpc.DeleteNpReply{Success: !s.rec.fail}, nil
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	socket := fs.String("socket", "/var/run/aws-node/npa.sock", "Unix socket to serve NPBackend on")
	record := fs.String("record", "", "file to append one JSON line per call to")
	fail := fs.Bool("fail", false, "answer Success=false")
	_ = fs.Parse(args)
	if *record == "" {
		return fmt.Errorf("-record is required")
	}
	_ = os.Remove(*socket)
	l, err := net.Listen("unix", *socket)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	rpc.RegisterNPBackendServer(srv, &npBackend{rec: &recorder{path: *record, fail: *fail}})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; srv.Stop() }()
	fmt.Fprintf(os.Stderr, "npa-contract: serving NPBackend on %s\n", *socket)
	return srv.Serve(l)
}

func config(args []string) error {
	fs := flag.NewFlagSet("config", flag.ExitOnError)
	socket := fs.String("socket", "/var/run/aws-node/ipamd.sock", "the IPAM daemon's Unix socket")
	_ = fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := rpc.NewConfigServerBackendClient(conn).GetNetworkPolicyConfigs(ctx, &emptypb.Empty{})
	if err != nil {
		return err
	}
	out, _ := json.Marshal(map[string]any{
		"NetworkPolicyMode": resp.NetworkPolicyMode,
		"MultiNICEnabled":   resp.MultiNICEnabled,
		"NodeIPv4":          resp.NodeIPv4,
		"NodeIPv6":          resp.NodeIPv6,
		"InstanceID":        resp.InstanceID,
		"Region":            resp.Region,
	})
	fmt.Println(string(out))
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: npa-contract serve|config [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "config":
		err = config(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "npa-contract: %v\n", err)
		os.Exit(1)
	}
}
