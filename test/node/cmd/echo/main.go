// Command echo is the test image of test/node: a static HTTP server that
// answers every request with "echo from HOSTNAME" (the pod's name), so a
// test can tell which pod a Service reached. More modes, for kubectl exec:
//
//	echo say WORDS...   prints WORDS
//	echo get URL        prints the status and body of GET URL; https URLs
//	                    are verified against the pod's service account CA
//	                    and sent its token, as an in-cluster client does
//	echo lookup NAME    resolves NAME with the pod's resolv.conf (Go's own
//	                    resolver: the image is static) and prints its
//	                    addresses, sorted, on one line; for an IP address,
//	                    its names (PTR). A name that does not exist prints
//	                    NXDOMAIN and exits 1
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

// serviceAccountDir is where the kubelet mounts the pod's token and CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount/"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "say" {
		fmt.Println(strings.Join(os.Args[2:], " "))
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "get" {
		if err := get(os.Args[2]); err != nil {
			log.Fatal(err)
		}
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "lookup" {
		lookup(os.Args[2])
		return
	}
	addr := flag.String("listen", ":8080", "address to serve on")
	flag.Parse()
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.Printf("Serving %s %s for %s", r.Method, r.URL.Path, r.RemoteAddr)
		_, _ = fmt.Fprintf(w, "echo from %s\n", host)
	})
	log.Printf("Listening on %s", *addr)
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

func get(url string) error {
	transport := &http.Transport{}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if ca, err := os.ReadFile(serviceAccountDir + "ca.crt"); err == nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if token, err := os.ReadFile(serviceAccountDir + "token"); err == nil && strings.HasPrefix(url, "https:") {
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	resp, err := (&http.Client{Transport: transport, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("%d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
	return nil
}

func lookup(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var found []string
	var err error
	if net.ParseIP(name) != nil {
		found, err = net.DefaultResolver.LookupAddr(ctx, name)
	} else {
		found, err = net.DefaultResolver.LookupHost(ctx, name)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		fmt.Println("NXDOMAIN")
		os.Exit(1)
	}
	if err != nil {
		log.Fatal(err)
	}
	slices.Sort(found)
	fmt.Println(strings.Join(found, " "))
}
