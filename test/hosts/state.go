package hosts

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// stateVersion is the version of state.json's format.
const stateVersion = 1

// instanceState is what an instance records in its state directory. Every
// resource is recorded before it is created (after checking that it does not
// exist yet), so teardown finds everything a crash may have left behind and
// touches nothing the harness did not create.
type instanceState struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	// Index names the instance's links and namespaces; unique on the machine.
	Index   int         `json:"index"`
	Subnet  string      `json:"subnet"`
	Gateway string      `json:"gateway"`
	Bridge  string      `json:"bridge,omitempty"`
	Base    string      `json:"base"`
	Owner   *processID  `json:"owner,omitempty"`
	Hosts   []hostState `json:"hosts"`
}

// hostState is the record of one host.
type hostState struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Machine is the machine name passed to systemd-nspawn; unique on the machine.
	Machine string   `json:"machine"`
	Netns   string   `json:"netns,omitempty"`
	Veth    string   `json:"veth,omitempty"`
	Cgroups []string `json:"cgroups,omitempty"`
	// Nspawn is the systemd-nspawn process while the host is powered on.
	Nspawn *processID `json:"nspawn,omitempty"`
	Cut    bool       `json:"cut,omitempty"`
}

// layout names the files below the state root.
type layout struct {
	root string
}

func (l layout) allocLock() string               { return filepath.Join(l.root, "alloc.lock") }
func (l layout) instanceLock(name string) string { return filepath.Join(l.root, "locks", name+".lock") }
func (l layout) instancesDir() string            { return filepath.Join(l.root, "instances") }
func (l layout) instanceDir(name string) string  { return filepath.Join(l.instancesDir(), name) }

// Files inside an instance directory.
const (
	stateFile     = "state.json"
	keyFile       = "id_ed25519"
	knownHosts    = "known_hosts"
	hostsFile     = "hosts.json"
	inventoryFile = "inventory.ini"
	sshConfigFile = "ssh_config"
	hostsSubdir   = "hosts"
)

// hostDir is the directory of one host inside an instance directory; it holds
// the overlay upper directory and the console log.
func hostDir(instanceDir, host string) string {
	return filepath.Join(instanceDir, hostsSubdir, host)
}

func upperDir(instanceDir, host string) string {
	return filepath.Join(hostDir(instanceDir, host), "upper")
}

func consoleLog(instanceDir, host string) string {
	return filepath.Join(hostDir(instanceDir, host), "console.log")
}

// loadState reads an instance's state; it returns an error wrapping
// os.ErrNotExist if there is none.
func loadState(dir string) (*instanceState, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("reading instance state: %w", err)
	}
	var st instanceState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(dir, stateFile), err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("%s has version %d, want %d", filepath.Join(dir, stateFile), st.Version, stateVersion)
	}
	return &st, nil
}

// saveState writes an instance's state atomically.
func saveState(dir string, st *instanceState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding instance state: %w", err)
	}
	return writeFile(filepath.Join(dir, stateFile), string(data)+"\n", 0o644)
}

// listInstances returns the names of the instance directories below the root.
func listInstances(l layout) ([]string, error) {
	entries, err := os.ReadDir(l.instancesDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// host returns the record of the named host.
func (st *instanceState) host(name string) (*hostState, error) {
	for i := range st.Hosts {
		if st.Hosts[i].Name == name {
			return &st.Hosts[i], nil
		}
	}
	names := make([]string, 0, len(st.Hosts))
	for _, h := range st.Hosts {
		names = append(names, h.Name)
	}
	return nil, fmt.Errorf("instance %s has no host %q (hosts: %v)", st.Name, name, names)
}
