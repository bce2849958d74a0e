package hosts

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/kao-io/kao/internal/machine"
)

// maxIndex bounds instance indexes; with it every link name fits in 15
// characters ("kao999v100").
const maxIndex = 999

// Names of the resources of instance idx. Bridge and veth names must fit in
// maxIfName; machine names double as network namespace names and must be
// unique on the machine (nspawn keys its runtime files by machine name).
func bridgeName(idx int) string               { return fmt.Sprintf("kaobr%d", idx) }
func vethName(idx, host int) string           { return fmt.Sprintf("kao%dv%d", idx, host) }
func machineName(idx int, host string) string { return fmt.Sprintf("kao%d-%s", idx, host) }

// allocate reserves an index and a /24 subnet for a new instance, under the
// state root's allocation lock, and writes the instance's first state. The
// caller holds the instance's own lock and has removed any previous state.
func allocate(ctx context.Context, cfg Config, l layout, base string) (*instanceState, error) {
	lock, err := machine.WaitLock(ctx, l.allocLock())
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()

	reapOrphans(ctx, cfg, l)

	usedIdx, usedNets, err := allocatedByOthers(cfg.Name, l)
	if err != nil {
		return nil, err
	}
	routes, err := machine.UsedPrefixes(ctx)
	if err != nil {
		return nil, err
	}
	usedNets = append(usedNets, routes...)

	idx, err := pickIndex(usedIdx)
	if err != nil {
		return nil, err
	}
	pool, err := parseSubnetPool(cfg.SubnetPool)
	if err != nil {
		return nil, err
	}
	subnet, err := pickSubnet(pool, usedNets)
	if err != nil {
		return nil, err
	}
	gw, err := ipAdd(subnet.Addr(), 1)
	if err != nil {
		return nil, err
	}
	st := &instanceState{
		Version: stateVersion,
		Name:    cfg.Name,
		Index:   idx,
		Subnet:  subnet.String(),
		Gateway: gw.String(),
		Base:    base,
		Owner:   cfg.owner,
	}
	dir := l.instanceDir(cfg.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating state dir: %w", err)
	}
	if err := saveState(dir, st); err != nil {
		return nil, err
	}
	return st, nil
}

// allocatedByOthers collects the indexes and subnets recorded by every other
// instance.
func allocatedByOthers(self string, l layout) (map[int]bool, []netip.Prefix, error) {
	names, err := listInstances(l)
	if err != nil {
		return nil, nil, err
	}
	used := map[int]bool{}
	var nets []netip.Prefix
	for _, name := range names {
		if name == self {
			continue
		}
		st, err := loadState(l.instanceDir(name))
		if errors.Is(err, os.ErrNotExist) {
			continue // being created (no state yet) or removed
		}
		if err != nil {
			return nil, nil, fmt.Errorf("instance %s: %w (remove it by hand, see hack/testhosts/README.md)", name, err)
		}
		used[st.Index] = true
		if p, err := netip.ParsePrefix(st.Subnet); err == nil {
			nets = append(nets, p)
		}
	}
	return used, nets, nil
}

// pickIndex returns the lowest index that no instance records and whose names
// are not taken on the machine (by anything, ours or not).
func pickIndex(used map[int]bool) (int, error) {
	for idx := 0; idx <= maxIndex; idx++ {
		if used[idx] || machine.LinkExists(bridgeName(idx)) {
			continue
		}
		if m, _ := filepath.Glob(machine.NetnsPath(machineName(idx, "*"))); len(m) > 0 {
			continue
		}
		return idx, nil
	}
	return 0, fmt.Errorf("no free instance index (all %d in use)", maxIndex+1)
}

// pickSubnet returns the first /24 of the pool that overlaps none of used.
func pickSubnet(pool netip.Prefix, used []netip.Prefix) (netip.Prefix, error) {
	count := 1 << (24 - pool.Bits())
	for i := 0; i < count; i++ {
		a, err := ipAdd(pool.Addr(), i*256)
		if err != nil {
			return netip.Prefix{}, err
		}
		cand := netip.PrefixFrom(a, 24)
		free := true
		for _, u := range used {
			if u.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			return cand, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free /24 in subnet pool %s", pool)
}

// reapOrphans tears down instances whose owning process (a test binary) is
// gone, so that a test killed by its timeout does not hold hosts forever. It
// skips instances whose lock is held and only logs failures.
func reapOrphans(ctx context.Context, cfg Config, l layout) {
	names, err := listInstances(l)
	if err != nil {
		cfg.Logf("listing instances to reap: %v", err)
		return
	}
	for _, name := range names {
		if name == cfg.Name {
			continue
		}
		st, err := loadState(l.instanceDir(name))
		if err != nil || st.Owner == nil || st.Owner.alive() {
			continue
		}
		lock, ok, err := machine.TryLock(l.instanceLock(name))
		if err != nil || !ok {
			continue
		}
		cfg.Logf("reclaiming instance %s: its owner (pid %d) is gone", name, st.Owner.PID)
		if err := teardown(ctx, cfg.Logf, l, name); err != nil {
			cfg.Logf("reclaiming instance %s: %v", name, err)
		}
		lock.Unlock()
	}
}
