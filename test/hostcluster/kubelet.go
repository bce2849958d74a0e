package hostcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Image is where the kubelet finds the programs of an image.
type Image struct {
	// Dir holds the image's programs, by the base name of a container's
	// command[0].
	Dir string
	// Tag is the tag a pod must ask for: the version of the programs in Dir.
	Tag string
}

// RunOptions choose what a Kubelet runs.
type RunOptions struct {
	// Namespace is the namespace whose pods and Services it serves.
	Namespace string
	// DNSDomain is the cluster's DNS domain. Empty means cluster.local.
	DNSDomain string
	// Registry is the only registry pods may pull from.
	Registry string
	// Components are the app.kubernetes.io/name values of the pods whose
	// programs run; other pods stay simulated by kwok alone.
	Components []string
	// Images maps image repositories (the part between the registry and
	// the tag) to programs. A key may also be repository:tag, for programs
	// of another version of a repository (an upgrade's old version): that
	// key is looked up first.
	Images map[string]Image
}

// Kubelet runs the real programs of some pods of a namespace on this
// machine, the way a kubelet, kube-proxy, cluster DNS and a load balancer
// would serve them in a real cluster:
//
//   - each pod gets an address of its own on loopback (127.B.1.x and up,
//     where B is the kubelet's block: see addressBlock) and runs
//     its container's command with the Secrets, ConfigMaps and volumes the
//     pod mounts (claims resolve to their PersistentVolume's directory), in
//     a mount namespace of its own whose /etc/hosts maps the cluster's DNS
//     names: <service>.<namespace>.svc[.<domain>], and
//     <pod>.<subdomain>.<namespace>.svc[.<domain>] for StatefulSet pods;
//   - each Service gets an address on loopback (127.B.0.x) and a proxy
//     that forwards each port to a running pod it selects;
//   - a NodePort or LoadBalancer Service is also served at every node's
//     address (Cluster.NodeAddresses) and its node port, as kube-proxy
//     serves node ports on every node;
//   - a LoadBalancer Service gets its Service address as ingress.
//
// Two things of a command are changed, because a pod's network and files
// are not the machine's: paths under a volume's mount path point to the
// volume's directory, and 0.0.0.0 (every address of the pod) becomes the
// pod's address. Everything else runs as the pod asks; a container that
// exits is started again, like restartPolicy Always. kwok still decides
// the pods' readiness. The kubelet runs as root (mount namespaces, ports
// below 1024).
type Kubelet struct {
	c    *Cluster
	opts RunOptions
	root string
	// block is the second octet of every address the kubelet hands out.
	block int

	mu       sync.Mutex
	pods     map[string]*localPod     // by pod UID
	services map[string]*localService // by name
	nextPod  int
	nextSvc  int
	errs     []string
	hosts    string
}

// localPod is a pod whose program runs here.
type localPod struct {
	pod  *corev1.Pod
	ip   string
	dir  string
	proc *group
	// stopped is set once the pod is gone; its program is not restarted.
	stopped bool
}

// localService is a Service served here.
type localService struct {
	svc *corev1.Service
	ip  string
	// listeners serve its ports, by address:port: at ip, and at the nodes'
	// addresses for node ports.
	listeners map[string]net.Listener
}

// syncInterval is how often the kubelet looks at pods and Services.
const syncInterval = 300 * time.Millisecond

// restartDelay is the wait before a container that exited starts again.
const restartDelay = 2 * time.Second

// RunPods starts a Kubelet for opts and stops it, and every program it
// runs, in t.Cleanup. It fails t when not run as root.
func (c *Cluster) RunPods(t testing.TB, opts RunOptions) *Kubelet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("host cluster: the simulated kubelet runs each pod in a mount namespace of its own and serves ports below 1024: run the test as root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("host cluster: the simulated kubelet needs unshare (util-linux): %v", err)
	}
	if opts.DNSDomain == "" {
		opts.DNSDomain = "cluster.local"
	}
	block, release, err := addressBlock()
	if err != nil {
		t.Fatalf("host cluster: %v", err)
	}
	t.Cleanup(release)
	k := &Kubelet{
		c: c, opts: opts, root: filepath.Join(c.Dir, "kubelet-"+opts.Namespace), block: block,
		pods: map[string]*localPod{}, services: map[string]*localService{},
	}
	if err := os.MkdirAll(k.root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := k.writeHosts(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			k.sync(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(syncInterval):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		k.stopAll()
	})
	return k
}

// Errors are the problems the kubelet met: pods it could not run as they
// ask (an image from another registry, a tag it has no programs for, a
// volume it cannot provide).
func (k *Kubelet) Errors() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.errs)
}

// Logs returns the end of the log of every program the kubelet ran, for a
// failing test.
func (k *Kubelet) Logs(lines int) string {
	var b strings.Builder
	for _, dir := range k.podDirs(func(*localPod) bool { return true }) {
		fmt.Fprintf(&b, "--- %s:\n%s\n", filepath.Base(dir), tail(filepath.Join(dir, "log"), lines))
	}
	return b.String()
}

// podDirs are the sorted directories of the pods the kubelet serves now
// that match.
func (k *Kubelet) podDirs(match func(*localPod) bool) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	dirs := []string{}
	for _, p := range k.pods {
		if match(p) {
			dirs = append(dirs, p.dir)
		}
	}
	sort.Strings(dirs)
	return dirs
}

// PodLogs returns the whole output of the programs of a component's pods
// (app.kubernetes.io/name) that the kubelet serves now, one after the other.
func (k *Kubelet) PodLogs(component string) string {
	var b strings.Builder
	for _, dir := range k.podDirs(func(p *localPod) bool { return p.pod.Labels["app.kubernetes.io/name"] == component }) {
		data, err := os.ReadFile(filepath.Join(dir, "log"))
		if err != nil {
			fmt.Fprintf(&b, "--- %s: (%v)\n", filepath.Base(dir), err)
			continue
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", filepath.Base(dir), data)
	}
	return b.String()
}

// HostPath is the directory that stands for a hostPath volume's path on
// the nodes: one directory of the kubelet's for every node.
func (k *Kubelet) HostPath(path string) string { return filepath.Join(k.root, "hostpath", path) }

// ServiceAddress is the address the kubelet serves a Service at, once it does.
func (k *Kubelet) ServiceAddress(name string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s := k.services[name]; s != nil {
		return s.ip
	}
	return ""
}

func (k *Kubelet) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	k.mu.Lock()
	defer k.mu.Unlock()
	if !slices.Contains(k.errs, msg) {
		k.errs = append(k.errs, msg)
	}
}

// sync brings the programs, proxies and /etc/hosts in line with the
// namespace's pods and Services.
func (k *Kubelet) sync(ctx context.Context) {
	ns := k.opts.Namespace
	svcs, err := k.c.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for i := range svcs.Items {
			k.serveService(ctx, &svcs.Items[i])
		}
		k.forgetServices(svcs.Items)
	}
	pods, err := k.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !slices.Contains(k.opts.Components, p.Labels["app.kubernetes.io/name"]) || p.DeletionTimestamp != nil ||
			p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
			continue
		}
		seen[string(p.UID)] = true
		k.runPod(ctx, p)
	}
	k.mu.Lock()
	var gone []*localPod
	for uid, lp := range k.pods {
		if !seen[uid] {
			gone = append(gone, lp)
			delete(k.pods, uid)
		}
	}
	k.mu.Unlock()
	for _, lp := range gone {
		k.mu.Lock()
		lp.stopped = true
		proc := lp.proc
		k.mu.Unlock()
		if proc != nil {
			go proc.stop() // a pod that goes terminates on its own time
		}
	}
	if err := k.writeHosts(); err != nil {
		k.errorf("writing the hosts file: %v", err)
	}
}

// serveService gives a Service an address, proxies for its ports at that
// address and, for a NodePort or LoadBalancer Service, at every node's
// address and the node port (as kube-proxy on each node would), and, for a
// LoadBalancer, its ingress.
func (k *Kubelet) serveService(ctx context.Context, svc *corev1.Service) {
	if svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	k.mu.Lock()
	ls := k.services[svc.Name]
	if ls == nil {
		k.nextSvc++
		if k.nextSvc > 254 {
			k.mu.Unlock()
			k.errorf("serving Service %s: more than 254 Services", svc.Name)
			return
		}
		ls = &localService{ip: fmt.Sprintf("127.%d.0.%d", k.block, k.nextSvc), listeners: map[string]net.Listener{}}
		k.services[svc.Name] = ls
	}
	ls.svc = svc
	// Every address:port the Service is served at, with its Service port.
	want := map[string]int32{}
	for _, port := range svc.Spec.Ports {
		want[net.JoinHostPort(ls.ip, strconv.Itoa(int(port.Port)))] = port.Port
		if port.NodePort != 0 && (svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer) {
			for _, node := range k.c.NodeAddresses {
				want[net.JoinHostPort(node, strconv.Itoa(int(port.NodePort)))] = port.Port
			}
		}
	}
	var missing []string
	for addr := range want {
		if ls.listeners[addr] == nil {
			missing = append(missing, addr)
		}
	}
	for addr, l := range ls.listeners {
		if _, ok := want[addr]; !ok {
			_ = l.Close() // a port or a node port the Service no longer has
			delete(ls.listeners, addr)
		}
	}
	k.mu.Unlock()
	sort.Strings(missing)
	for _, addr := range missing {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			k.errorf("serving Service %s at %s: %v", svc.Name, addr, err)
			continue
		}
		k.mu.Lock()
		if k.services[svc.Name] != ls {
			k.mu.Unlock()
			_ = l.Close()
			return
		}
		ls.listeners[addr] = l
		k.mu.Unlock()
		go k.proxy(l, svc.Name, want[addr])
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		(len(svc.Status.LoadBalancer.Ingress) == 0 || svc.Status.LoadBalancer.Ingress[0].IP != ls.ip) {
		cur := svc.DeepCopy()
		vip := corev1.LoadBalancerIPModeVIP
		cur.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ls.ip, IPMode: &vip}}
		if _, err := k.c.Client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
			k.errorf("setting the load balancer address of Service %s: %v", svc.Name, err)
		}
	}
}

// forgetServices stops serving Services that are gone.
func (k *Kubelet) forgetServices(current []corev1.Service) {
	names := map[string]bool{}
	for _, s := range current {
		names[s.Name] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, ls := range k.services {
		if !names[name] {
			for _, l := range ls.listeners {
				_ = l.Close()
			}
			delete(k.services, name)
		}
	}
}

// proxy forwards the connections of one Service port to a pod it selects.
func (k *Kubelet) proxy(l net.Listener, service string, port int32) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = conn.Close() }()
			backend := k.backend(service, port)
			if backend == "" {
				return
			}
			up, err := net.DialTimeout("tcp", backend, 5*time.Second)
			if err != nil {
				return
			}
			defer func() { _ = up.Close() }()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
			go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
			<-done
		}()
	}
}

// backend picks a running pod of the Service for port, as ip:targetPort.
func (k *Kubelet) backend(service string, port int32) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ls := k.services[service]
	if ls == nil || len(ls.svc.Spec.Selector) == 0 {
		return ""
	}
	var target intstr.IntOrString
	for _, p := range ls.svc.Spec.Ports {
		if p.Port == port {
			target = p.TargetPort
		}
	}
	sel := labels.SelectorFromSet(ls.svc.Spec.Selector)
	uids := make([]string, 0, len(k.pods))
	for uid := range k.pods {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	for _, uid := range uids {
		lp := k.pods[uid]
		if lp.proc == nil || lp.stopped || !sel.Matches(labels.Set(lp.pod.Labels)) {
			continue
		}
		n := target.IntValue()
		if target.Type == intstr.String {
			n = 0
			for _, c := range lp.pod.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name == target.StrVal {
						n = int(cp.ContainerPort)
					}
				}
			}
		}
		if n == 0 {
			n = int(port)
		}
		return net.JoinHostPort(lp.ip, strconv.Itoa(n))
	}
	return ""
}

// writeHosts writes the hosts file every program sees as /etc/hosts. It is
// rewritten in place: the programs' bind mounts keep the same file.
func (k *Kubelet) writeHosts() error {
	ns, domain := k.opts.Namespace, k.opts.DNSDomain
	lines := []string{"127.0.0.1 localhost", "::1 localhost ip6-localhost"}
	k.mu.Lock()
	for name, ls := range k.services {
		lines = append(lines, fmt.Sprintf("%s %s.%s.svc.%s %s.%s.svc", ls.ip, name, ns, domain, name, ns))
	}
	for _, lp := range k.pods {
		if h, sub := lp.pod.Spec.Hostname, lp.pod.Spec.Subdomain; h != "" && sub != "" {
			lines = append(lines, fmt.Sprintf("%s %s.%s.%s.svc.%s %s.%s.%s.svc", lp.ip, h, sub, ns, domain, h, sub, ns))
		}
	}
	k.mu.Unlock()
	sort.Strings(lines[2:])
	content := strings.Join(lines, "\n") + "\n"
	if content == k.hosts {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(k.root, "hosts"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		_ = f.Close()
		return err
	}
	k.hosts = content
	return f.Close()
}

// runPod starts a pod's program, or starts it again when it exited.
func (k *Kubelet) runPod(ctx context.Context, p *corev1.Pod) {
	k.mu.Lock()
	lp := k.pods[string(p.UID)]
	if lp == nil {
		n := k.nextPod
		k.nextPod++
		lp = &localPod{pod: p, ip: fmt.Sprintf("127.%d.%d.%d", k.block, 1+n/254, 1+n%254),
			dir: filepath.Join(k.root, "pods", p.Name+"-"+string(p.UID)[:8])}
		k.pods[string(p.UID)] = lp
	}
	lp.pod = p
	proc := lp.proc
	k.mu.Unlock()
	if proc != nil && !proc.exited() {
		return
	}
	if proc != nil && time.Since(exitTime(lp)) < restartDelay {
		// Like a crash-looping container: again, after a pause.
		return
	}
	cmd, err := k.command(ctx, lp)
	if errors.Is(err, errNotYet) {
		return // a claim still binding: the next sync tries again
	}
	if err != nil {
		k.errorf("pod %s: %v", p.Name, err)
		return
	}
	g, err := startGroup(cmd)
	if err != nil {
		k.errorf("pod %s: starting %s: %v", p.Name, cmd.Path, err)
		return
	}
	k.mu.Lock()
	lp.proc = g
	k.mu.Unlock()
	go func() {
		<-g.done
		if f, ok := cmd.Stdout.(*os.File); ok {
			_ = f.Close()
		}
		_ = os.WriteFile(filepath.Join(lp.dir, "exited"), []byte(time.Now().Format(time.RFC3339Nano)), 0o600)
	}()
}

// exitTime is when the pod's program last exited.
func exitTime(lp *localPod) time.Time {
	data, err := os.ReadFile(filepath.Join(lp.dir, "exited"))
	if err != nil {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, string(data))
	return t
}

// errNotYet means a pod cannot run yet, as a kubelet would wait: a claim
// that is not bound.
var errNotYet = errors.New("not bound yet")

// varRef is a $(NAME) reference in a command, as Kubernetes expands it.
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// command builds the command of a pod's first container: its volumes as
// directories, its environment, its references expanded, its paths and
// wildcard addresses made local.
func (k *Kubelet) command(ctx context.Context, lp *localPod) (*exec.Cmd, error) {
	p := lp.pod
	if len(p.Spec.Containers) == 0 || len(p.Spec.Containers[0].Command) == 0 {
		return nil, errors.New("its first container has no command")
	}
	ctr := p.Spec.Containers[0]
	bin, err := k.program(ctr.Image, ctr.Command[0])
	if err != nil {
		return nil, err
	}
	volumes, err := k.volumes(ctx, lp)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = p.Name
			case "metadata.namespace":
				env[e.Name] = p.Namespace
			case "status.podIP":
				env[e.Name] = lp.ip
			default:
				return nil, fmt.Errorf("env %s: field %s is not simulated", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			return nil, fmt.Errorf("env %s: only values and field references are simulated", e.Name)
		}
	}
	// Mounts, longest mount path first, so /a/b wins over /a.
	type mount struct{ path, dir string }
	var mounts []mount
	for _, m := range ctr.VolumeMounts {
		dir, ok := volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %s names no volume", m.Name)
		}
		sub := m.SubPath
		if m.SubPathExpr != "" {
			sub = varRef.ReplaceAllStringFunc(m.SubPathExpr, func(r string) string { return env[varRef.FindStringSubmatch(r)[1]] })
		}
		if sub != "" {
			dir = filepath.Join(dir, sub)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
		}
		mounts = append(mounts, mount{path: strings.TrimRight(m.MountPath, "/"), dir: dir})
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].path) > len(mounts[j].path) })
	args := make([]string, 0, len(ctr.Command)+len(ctr.Args))
	for _, a := range append(slices.Clone(ctr.Command[1:]), ctr.Args...) {
		a = varRef.ReplaceAllStringFunc(a, func(r string) string {
			if v, ok := env[varRef.FindStringSubmatch(r)[1]]; ok {
				return v
			}
			return r
		})
		for _, m := range mounts {
			a = strings.ReplaceAll(a, m.path+"/", m.dir+"/")
			if strings.HasSuffix(a, "="+m.path) || a == m.path {
				a = strings.TrimSuffix(a, m.path) + m.dir
			}
		}
		a = strings.ReplaceAll(a, "0.0.0.0", lp.ip)
		args = append(args, a)
	}
	// unshare gives the program a mount namespace in which the hosts file
	// is /etc/hosts; the shell mounts it and becomes the program.
	script := `mount --bind "$0" /etc/hosts && exec "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", script,
		filepath.Join(k.root, "hosts"), bin}, args...)...)
	cmd.Dir = lp.dir
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + lp.dir}
	for name, v := range env {
		cmd.Env = append(cmd.Env, name+"="+v)
	}
	log, err := os.OpenFile(filepath.Join(lp.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	return cmd, nil
}

// program finds the program a container runs: its image must come from
// the registry, with a tag the kubelet has programs for.
func (k *Kubelet) program(image, command string) (string, error) {
	ref, ok := strings.CutPrefix(image, k.opts.Registry+"/")
	if !ok {
		return "", fmt.Errorf("image %s is not from the registry %s", image, k.opts.Registry)
	}
	repo, tag, _ := strings.Cut(ref, ":")
	img, ok := k.opts.Images[ref]
	if !ok {
		img, ok = k.opts.Images[repo]
	}
	if !ok {
		return "", fmt.Errorf("image %s: no programs for repository %s", image, repo)
	}
	if tag != img.Tag {
		return "", fmt.Errorf("image %s: the programs are version %s, not %s", image, img.Tag, tag)
	}
	bin := filepath.Join(img.Dir, filepath.Base(command))
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("image %s has no %s: %w", image, filepath.Base(command), err)
	}
	return bin, nil
}

// volumes makes a directory for each volume a pod's container mounts and returns them
// by volume name: Secrets and ConfigMaps written out (0600), empty
// directories, host paths under the kubelet's directory, and claims as
// their PersistentVolume's directory.
func (k *Kubelet) volumes(ctx context.Context, lp *localPod) (map[string]string, error) {
	p := lp.pod
	mounted := map[string]bool{}
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		mounted[m.Name] = true
	}
	out := map[string]string{}
	for _, v := range p.Spec.Volumes {
		if !mounted[v.Name] {
			continue // nothing of this pod reads it
		}
		dir := filepath.Join(lp.dir, "volumes", v.Name)
		switch {
		case v.Secret != nil:
			s, err := k.c.Client.CoreV1().Secrets(p.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if err := writeFiles(dir, s.Data); err != nil {
				return nil, err
			}
		case v.ConfigMap != nil:
			cm, err := k.c.Client.CoreV1().ConfigMaps(p.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			data := map[string][]byte{}
			for key, val := range cm.Data {
				data[key] = []byte(val)
			}
			if err := writeFiles(dir, data); err != nil {
				return nil, err
			}
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
		case v.HostPath != nil:
			dir = k.HostPath(v.HostPath.Path)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
		case v.PersistentVolumeClaim != nil:
			pvc, err := k.c.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
				return nil, fmt.Errorf("volume %s: claim %s: %w", v.Name, pvc.Name, errNotYet)
			}
			pv, err := k.c.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if pv.Spec.HostPath == nil {
				return nil, fmt.Errorf("volume %s: PersistentVolume %s is no host path", v.Name, pv.Name)
			}
			dir = pv.Spec.HostPath.Path
		default:
			return nil, fmt.Errorf("volume %s: its kind is not simulated", v.Name)
		}
		out[v.Name] = dir
	}
	return out, nil
}

// writeFiles writes each key of data as a file of dir, mode 0600.
func writeFiles(dir string, data map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, content := range data {
		if strings.ContainsAny(name, "/\x00") || name == ".." || name == "." {
			return fmt.Errorf("key %q is no file name", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// stopAll stops every program and proxy.
func (k *Kubelet) stopAll() {
	k.mu.Lock()
	procs := []*group{}
	for _, lp := range k.pods {
		lp.stopped = true
		if lp.proc != nil {
			procs = append(procs, lp.proc)
		}
	}
	for _, ls := range k.services {
		for _, l := range ls.listeners {
			_ = l.Close()
		}
	}
	k.mu.Unlock()
	var wg sync.WaitGroup
	for _, g := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.stop()
		}()
	}
	wg.Wait()
}

// Address blocks: each Kubelet of the machine (tests of several packages
// may run at once) takes 127.B.0.0/16 for one B in [firstBlock, lastBlock],
// held by an flock(2) on a file of the machine's temporary directory.
const (
	firstBlock = 64
	lastBlock  = 127
)

// addressBlock takes a free address block and returns it with the function
// that releases it.
func addressBlock() (int, func(), error) {
	for b := firstBlock; b <= lastBlock; b++ {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("kao-hostcluster-127.%d.lock", b))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return 0, nil, fmt.Errorf("opening the address block lock %s: %w", path, err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return b, func() { _ = f.Close() }, nil
		}
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return 0, nil, fmt.Errorf("locking %s: %w", path, err)
		}
	}
	return 0, nil, fmt.Errorf("every loopback block 127.%d-%d.0.0/16 is taken by another kubelet", firstBlock, lastBlock)
}
