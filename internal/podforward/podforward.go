// Package podforward opens TCP connections to a pod's ports through the
// Kubernetes API server's pods/portforward subresource, the way `kubectl
// port-forward` reaches a pod, but without a listening socket: a caller gets
// a net.Conn per connection, carried by a pair of streams (data and error)
// on one upgraded connection per pod.
//
// kao uses it to reach what resolves only inside a remote host cluster: the
// members of a Containerized etcd, for snapshots. The caller authenticates
// to what it reaches (etcd's mutual TLS) as it would over the network; the
// host cluster's credentials only open the tunnel, and need the right to
// create pods/portforward in the namespace.
package podforward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Dialer connects to the ports of the pods of one namespace. It keeps one
// upgraded connection per pod until Close, and opens a new one when the API
// server or the kubelet drops it. It is safe for concurrent use.
type Dialer struct {
	config    *rest.Config
	client    kubernetes.Interface
	namespace string

	mu     sync.Mutex
	conns  map[string]httpstream.Connection // pod name → its tunnel
	nextID int
	closed bool
}

// New returns a Dialer for the pods of namespace, through the API server
// config reaches.
func New(config *rest.Config, namespace string) (*Dialer, error) {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &Dialer{config: config, client: client, namespace: namespace, conns: map[string]httpstream.Connection{}}, nil
}

// ErrClosed is returned by Dial after Close.
var ErrClosed = errors.New("the pod dialer is closed")

// Dial connects to port of pod. The connection fails on its first read if
// nothing in the pod listens on port: the kubelet's message says why.
func (d *Dialer) Dial(ctx context.Context, pod string, port int) (net.Conn, error) {
	tunnel, err := d.tunnel(ctx, pod)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.nextID++
	id := d.nextID
	d.mu.Unlock()

	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(port))
	headers.Set(corev1.PortForwardRequestIDHeader, strconv.Itoa(id))
	errStream, err := tunnel.CreateStream(headers)
	if err != nil {
		return nil, fmt.Errorf("opening a connection to port %d of pod %s/%s: %w", port, d.namespace, pod, err)
	}
	_ = errStream.Close() // only the kubelet writes on it
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := tunnel.CreateStream(headers)
	if err != nil {
		tunnel.RemoveStreams(errStream)
		return nil, fmt.Errorf("opening a connection to port %d of pod %s/%s: %w", port, d.namespace, pod, err)
	}

	local, remote := net.Pipe()
	c := &conn{Conn: local, done: make(chan struct{})}
	go c.relay(tunnel, remote, data, errStream, fmt.Sprintf("port %d of pod %s/%s", port, d.namespace, pod))
	return c, nil
}

// Close closes every tunnel, and with them every connection.
func (d *Dialer) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for pod, t := range d.conns {
		_ = t.Close()
		delete(d.conns, pod)
	}
	return nil
}

// tunnel returns the pod's open tunnel, or opens one.
func (d *Dialer) tunnel(ctx context.Context, pod string) (httpstream.Connection, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	if t, ok := d.conns[pod]; ok && !isClosed(t) {
		d.mu.Unlock()
		return t, nil
	}
	d.mu.Unlock()

	t, err := d.open(ctx, pod)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch prev, ok := d.conns[pod]; {
	case d.closed:
		_ = t.Close()
		return nil, ErrClosed
	case ok && !isClosed(prev): // another Dial opened one meanwhile
		_ = t.Close()
		return prev, nil
	}
	d.conns[pod] = t
	go func() {
		<-t.CloseChan()
		d.mu.Lock()
		if d.conns[pod] == t {
			delete(d.conns, pod)
		}
		d.mu.Unlock()
	}()
	return t, nil
}

// open upgrades a request to the pod's portforward subresource: over a
// WebSocket first, as kubectl does, and over SPDY where the API server or a
// proxy between refuses the WebSocket upgrade. The upgrade takes no context,
// so a cancelled ctx abandons it and closes what it brings later.
func (d *Dialer) open(ctx context.Context, pod string) (httpstream.Connection, error) {
	u := d.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(d.namespace).Name(pod).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(d.config)
	if err != nil {
		return nil, err
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	wsDialer, err := portforward.NewSPDYOverWebsocketDialer(u, d.config)
	if err != nil {
		return nil, err
	}
	dialer := portforward.NewFallbackDialer(wsDialer, spdyDialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})

	type result struct {
		conn     httpstream.Connection
		protocol string
		err      error
	}
	done := make(chan result, 1)
	go func() {
		c, p, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
		done <- result{c, p, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("opening a port-forward to pod %s/%s: %w", d.namespace, pod, r.err)
		}
		if r.protocol != portforward.PortForwardProtocolV1Name {
			_ = r.conn.Close()
			return nil, fmt.Errorf("opening a port-forward to pod %s/%s: the API server speaks %q, not %q",
				d.namespace, pod, r.protocol, portforward.PortForwardProtocolV1Name)
		}
		return r.conn, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				_ = r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("opening a port-forward to pod %s/%s: %w", d.namespace, pod, ctx.Err())
	}
}

func isClosed(t httpstream.Connection) bool {
	select {
	case <-t.CloseChan():
		return true
	default:
		return false
	}
}

// conn is the caller's end of a pipe whose other end relay copies to and
// from the pod. A read that reaches the end returns the kubelet's error for
// the connection, if it sent one, in place of io.EOF.
type conn struct {
	net.Conn
	done chan struct{} // closed when relay has ended and set err
	err  error
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if errors.Is(err, io.EOF) {
		<-c.done
		if c.err != nil {
			return n, c.err
		}
	}
	return n, err
}

// relay copies between remote (the pipe's end) and the data stream until
// either side ends, then reads what the kubelet said on the error stream and
// closes the pipe.
func (c *conn) relay(tunnel httpstream.Connection, remote net.Conn, data, errStream httpstream.Stream, what string) {
	ended := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(remote, data) // from the pod
		ended <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(data, remote) // to the pod; ends when the caller closes its end
		ended <- struct{}{}
	}()
	<-ended
	// Nothing more goes either way: resetting the data stream ends the other
	// copy and lets the kubelet close the error stream.
	_ = data.Reset()
	msg, err := io.ReadAll(errStream)
	switch {
	case len(msg) > 0:
		c.err = fmt.Errorf("forwarding to %s: %s", what, strings.TrimSpace(string(msg)))
	case err != nil && !isClosed(tunnel):
		c.err = fmt.Errorf("forwarding to %s: reading the kubelet's error stream: %w", what, err)
	}
	close(c.done)
	_ = remote.Close()
	tunnel.RemoveStreams(data, errStream)
}
