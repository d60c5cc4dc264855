package chaos_test

import (
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/rocketry-go/rocketry/producer"
)

// threeBrokersScheme is the brokers of threeBrokersOneDown behind one
// target with a scheme, resolved by grpc-go's manual resolver, whose answer
// changes during the run: an address leaves it and comes back. The producer
// resolves the target into one connection per address, so a retry after an
// unknown outcome stays on its broker as with a host:port list (before,
// gRPC's balancer picked the broker of each attempt, and messages were
// stored on two).
func threeBrokersScheme(seed uint64, messages int) scenario {
	sc := threeBrokersOneDown(seed, messages)
	sc.name, sc.scheme = "three brokers, one down, behind a scheme target", true
	return sc
}

// schemeTarget gives addrs to the producer as one target with a scheme. It
// returns the target, the options that hand the producer its resolver (and
// gRPC round_robin, as a user spreading sends over a DNS name would set), and
// churn, which until stop closes replaces the resolver's answer on a
// seeded schedule (all addresses, or all but one), then gives all of them
// again.
func schemeTarget(sc scenario, addrs []string) (string, []producer.Option, func(stop <-chan struct{})) {
	r := manual.NewBuilderWithScheme("chaos")
	all := resolver.State{}
	for _, a := range addrs {
		all.Addresses = append(all.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(all)
	churn := func(stop <-chan struct{}) {
		rng := rand.New(rand.NewPCG(sc.seed, 0x5c4e3e))
		tk := time.NewTicker(4 * sc.tick)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				r.UpdateState(all)
				return
			case <-tk.C:
			}
			if rng.IntN(2) == 0 {
				r.UpdateState(all)
				continue
			}
			drop := rng.IntN(len(addrs))
			var s resolver.State
			for i, a := range all.Addresses {
				if i != drop {
					s.Addresses = append(s.Addresses, a)
				}
			}
			r.UpdateState(s)
		}
	}
	rr := grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)
	return "chaos:///brokers", []producer.Option{producer.WithResolvers(r), producer.WithDialOptions(rr)}, churn
}
