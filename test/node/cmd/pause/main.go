// Command pause is the sandbox ("pause") image of the real test node
// (test/node): the process that holds a pod's namespaces. It waits for
// SIGTERM or SIGINT and exits 0; built static, it is the image's only file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
