// Command grpcservicename sets the gRPC service name of a generated
// *_grpc.pb.go file: `go generate` runs it after buf generate on
// gen/rocketry/rocketmq/v2/service_grpc.pb.go, whose proto package is
// rocketry's own (rocketry.rocketmq.v2) while its method paths must be
// upstream's (/apache.rocketmq.v2.MessagingService/<Method>), the one name
// the RocketMQ 5 protocol puts on the wire.
//
// Usage:
//
//	grpcservicename -from rocketry.rocketmq.v2.MessagingService -to apache.rocketmq.v2.MessagingService FILE
//
// It replaces every quoted occurrence of the name, alone ("from") or at the
// start of a method path ("/from/"), and fails when there is none, so that
// a change of the generator's output does not go unnoticed.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	from := flag.String("from", "", "the service's full name as generated")
	to := flag.String("to", "", "the service's full name on the wire")
	flag.Parse()
	if *from == "" || *to == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: grpcservicename -from NAME -to NAME FILE")
		os.Exit(2)
	}
	if err := rename(flag.Arg(0), *from, *to); err != nil {
		fmt.Fprintln(os.Stderr, "grpcservicename:", err)
		os.Exit(1)
	}
}

func rename(path, from, to string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out := bytes.ReplaceAll(src, []byte(`"`+from+`"`), []byte(`"`+to+`"`))
	out = bytes.ReplaceAll(out, []byte(`"/`+from+`/`), []byte(`"/`+to+`/`))
	if bytes.Equal(out, src) {
		return fmt.Errorf("%s: no quoted %q to rename", path, from)
	}
	return os.WriteFile(path, out, 0o644)
}
