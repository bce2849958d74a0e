package node

import (
	"archive/tar"
	"bytes"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAddressesForCutsOneSlashTwentyTwoPerCluster: each cluster's /22 is
// its link, pods, Services and load-balancer pool, one /24 each, and the
// last cluster's ends at the end of the pool.
func TestAddressesForCutsOneSlashTwentyTwoPerCluster(t *testing.T) {
	pool := netip.MustParsePrefix(DefaultSubnetPool)
	for _, tc := range []struct {
		// idx is the cluster index.
		idx int
		// link, node, pods, services, api, dns and lb are the addresses
		// wanted.
		link, node, pods, services, api, dns, lb string
	}{
		{0, "10.214.0.0/24", "10.214.0.2", "10.214.1.0/24", "10.214.2.0/24", "10.214.2.1", "10.214.2.10", "10.214.3.0/24"},
		{1, "10.214.4.0/24", "10.214.4.2", "10.214.5.0/24", "10.214.6.0/24", "10.214.6.1", "10.214.6.10", "10.214.7.0/24"},
		{63, "10.214.252.0/24", "10.214.252.2", "10.214.253.0/24", "10.214.254.0/24", "10.214.254.1", "10.214.254.10", "10.214.255.0/24"},
	} {
		a, err := addressesFor(pool, tc.idx)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{a.Link.String(), a.Node.String(), a.Pods.String(), a.Services.String(), a.APIService.String(), a.DNSService.String(), a.LoadBalancers.String()}
		want := []string{tc.link, tc.node, tc.pods, tc.services, tc.api, tc.dns, tc.lb}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("cluster %d: got %v, want %v", tc.idx, got, want)
		}
	}
	if _, err := addressesFor(pool, 64); err == nil {
		t.Error("cluster 64 of a /16: got no error")
	}
	if _, err := addressesFor(netip.MustParsePrefix("10.0.0.0/22"), 1); err == nil {
		t.Error("cluster 1 of a /22: got no error")
	}
}

func TestOptionsRejectAPoolThatHoldsNoCluster(t *testing.T) {
	for _, pool := range []string{"10.214.0.0/23", "10.214.0.1/16", "fd00::/64", "10.0.0.0/8"} {
		if _, err := (Options{SubnetPool: pool}).complete(); err == nil {
			t.Errorf("pool %s: got no error", pool)
		}
	}
}

// TestWriteImageIsDeterministicAndComplete: the same program gives the same
// archive, and every blob the index reaches is in it under its digest.
func TestWriteImageIsDeterministicAndComplete(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := Image{Name: "kao.test/prog:1", Binary: bin, Args: []string{"serve"}}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, p := range []string{a, b} {
		if err := WriteImage(img, p); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Fatal("two archives of the same image differ")
	}

	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(da))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[hdr.Name] = data
	}
	// The archive's structure is internal/ociimage's (tested there): here,
	// the image kao's tests import.
	if !strings.Contains(string(files["index.json"]), `"io.containerd.image.name":"kao.test/prog:1"`) {
		t.Errorf("index.json does not name kao.test/prog:1: %s", files["index.json"])
	}
	found := false
	for name, data := range files {
		if strings.HasPrefix(name, "blobs/") && strings.Contains(string(data), `"Entrypoint":["/prog"],"Cmd":["serve"]`) {
			found = true
		}
	}
	if !found {
		t.Error("no image config with entrypoint /prog and arguments serve")
	}
}

func TestUnescapeMountUndoesOctalEscapes(t *testing.T) {
	if got := unescapeMount(`/var/lib/a\040b`); got != "/var/lib/a b" {
		t.Errorf("got %q", got)
	}
}
