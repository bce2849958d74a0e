// Command coredns is CoreDNS with only the plugins the test node's cluster
// DNS uses (test/node): kubernetes answers for the cluster's zones, errors
// and log report failures, health and ready serve the pod's probes, and
// reload picks up an edited Corefile. The other plugins, and the clouds'
// SDKs some of them need, are not built.
//
// coremain.Run is CoreDNS's own main. CoreDNS's list of directives
// (dnsserver.Directives) still names every plugin: it only fixes the order
// in which the plugins a Corefile names run.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
