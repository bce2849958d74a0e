package node

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// stateVersion is the version of state.json's format.
const stateVersion = 1

// state is what a cluster records in its directory, each resource before it
// is created, so that teardown (of this cluster, or of one whose test binary
// died) removes exactly what the cluster created.
type state struct {
	Version int `json:"version"`
	Index   int `json:"index"`
	// Netns and Veth are the node's network namespace and the machine's end
	// of its link. The machine's routes to the pod, Service and
	// load-balancer ranges name the link, so they go when it is deleted.
	Netns string `json:"netns,omitempty"`
	Veth  string `json:"veth,omitempty"`
	// CNINetwork names libcni's cache files of the cluster's pods.
	CNINetwork string `json:"cniNetwork,omitempty"`
	// Processes are the programs the cluster started, in start order.
	Processes []processID `json:"processes,omitempty"`
	// CreatedDirs are machine-wide directories that did not exist before the
	// cluster and that the kubelet or CNI create (/var/log/containers,
	// /var/lib/cni): teardown removes them if they are empty.
	CreatedDirs []string `json:"createdDirs,omitempty"`
	// NetnsDirMounted is true if /run/netns was not a mount point before
	// the cluster (`ip netns add` makes it one).
	NetnsDirMounted bool `json:"netnsDirMounted,omitempty"`
}

// machineDirs are the directories outside the cluster directory that the
// kubelet, libcni and runc create whatever their configuration says: the
// kubelet's log links, libcni's cache, and the parent cgroup of the
// containers (CONTROLLER/k8s.io; containerd names it after its namespace).
// Children before parents: teardown removes them in this order.
func machineDirs() []string {
	dirs := []string{"/var/log/containers", "/var/lib/cni/results", "/var/lib/cni"}
	controllers, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range controllers {
		if c.IsDir() {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", c.Name(), "k8s.io"))
		}
	}
	return dirs
}

func loadState(dir string) (*state, error) {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(dir, "state.json"), err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("%s has version %d, want %d", filepath.Join(dir, "state.json"), st.Version, stateVersion)
	}
	return &st, nil
}

func saveState(dir string, st *state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "state.json.tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the cluster state: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, "state.json"))
}

// clusterDir and lockPath name a cluster's directory and lock below the
// state root. The lock lives beside the directory, so teardown can remove
// the directory while it holds the lock.
func clusterDir(root string, idx int) string { return filepath.Join(root, strconv.Itoa(idx)) }
func lockPath(root string, idx int) string   { return filepath.Join(root, strconv.Itoa(idx)+".lock") }
