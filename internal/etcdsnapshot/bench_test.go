package etcdsnapshot

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// benchDataBytes is how much data the benchmark puts into etcd: a
// Karmada control plane with many resources and member clusters.
const benchDataBytes = 200 << 20

// BenchmarkSnapshot measures the operator's snapshot path (Save: stream over
// TLS, hash, check etcd's integrity hash, fsync) against `etcdctl snapshot
// save` run directly on the same member holding about 200 MiB. The two
// alternate, each going first every other round, so load from other work
// on the machine falls on both. It reports both throughputs and their ratio
// (operator / etcdctl; the goal is at least 0.9), and the time etcdutl takes
// to check the snapshot, which the operator adds after the stream.
//
//	go test ./internal/etcdsnapshot -run '^$' -bench Snapshot -benchtime 6x
func BenchmarkSnapshot(b *testing.B) {
	e, stop := startTLSEtcd(b)
	defer stop()
	loadBenchData(b, e)
	dir := b.TempDir()
	ctx := context.Background()

	var opTime, ctlTime time.Duration
	var opBytes, ctlBytes int64
	operator := func(i int) {
		path := filepath.Join(dir, fmt.Sprintf("op-%d.db", i))
		start := time.Now()
		saved, err := Save(ctx, e.endpoint, e.clientTLS, nil, path, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		opTime += time.Since(start)
		opBytes += saved.Size
		_ = os.Remove(path)
	}
	etcdctl := func(i int) {
		path := filepath.Join(dir, fmt.Sprintf("ctl-%d.db", i))
		cmd := exec.Command(filepath.Join(e.bin, "etcdctl"), "--endpoints="+e.endpoint,
			"--cacert="+e.caFile, "--cert="+e.certFile, "--key="+e.keyFile, "snapshot", "save", path)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
		}
		ctlTime += time.Since(start)
		st, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		ctlBytes += st.Size()
		_ = os.Remove(path)
	}

	rounds := 0
	for b.Loop() {
		if rounds%2 == 0 {
			operator(rounds)
			etcdctl(rounds)
		} else {
			etcdctl(rounds)
			operator(rounds)
		}
		rounds++
	}
	b.StopTimer()

	// etcdutl's check, which the operator runs after every stream.
	path := filepath.Join(dir, "check.db")
	if _, err := Save(ctx, e.endpoint, e.clientTLS, nil, path, Limits{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if _, err := ReadStatus(ctx, filepath.Join(e.bin, "etcdutl"), path); err != nil {
		b.Fatal(err)
	}
	check := time.Since(start)

	mibps := func(n int64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }
	op, ctl := mibps(opBytes, opTime), mibps(ctlBytes, ctlTime)
	b.ReportMetric(op, "operator-MiB/s")
	b.ReportMetric(ctl, "etcdctl-MiB/s")
	b.ReportMetric(op/ctl, "ratio")
	b.ReportMetric(check.Seconds(), "etcdutl-check-s")
	b.Logf("%d rounds of a %.0f MiB snapshot: operator %.0f MiB/s (%s each), etcdctl snapshot save %.0f MiB/s (%s each): ratio %.2f; etcdutl snapshot status adds %s",
		rounds, float64(opBytes)/float64(rounds)/(1<<20), op, (opTime / time.Duration(rounds)).Round(time.Millisecond),
		ctl, (ctlTime / time.Duration(rounds)).Round(time.Millisecond), op/ctl, check.Round(time.Millisecond))
}

// loadBenchData puts benchDataBytes of 10 KiB values into etcd, in
// transactions of 100 puts.
func loadBenchData(b *testing.B, e *tlsEtcd) {
	b.Helper()
	cli := e.client(b)
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	value := make([]byte, 10<<10)
	const perTxn = 100
	for i := 0; i < benchDataBytes/len(value); i += perTxn {
		ops := make([]clientv3.Op, 0, perTxn)
		for j := range perTxn {
			if _, err := rand.Read(value); err != nil {
				b.Fatal(err)
			}
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/bench/%08d", i+j), string(value)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
}
