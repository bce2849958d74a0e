// Package machine holds what kao's test harnesses (test/hosts, test/node) do
// to this machine alike: exclusive file locks that say which harness owns
// what, and the network namespaces, links and routes they check before they
// take an address block.
package machine
