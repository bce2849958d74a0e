// Command echo is the test image of test/node: a static HTTP server that
// answers every request with "echo from HOSTNAME" (the pod's name), so a
// test can tell that a Service reached a pod. Run as "echo say WORDS..." it
// prints WORDS and exits, which a test runs with kubectl exec.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "say" {
		fmt.Println(strings.Join(os.Args[2:], " "))
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
