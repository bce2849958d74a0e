package pipeline

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
)

// checkSSHKey refuses a private key ansible could not use: one that is not a
// private key at all, or one protected by a passphrase (runs have no
// terminal to ask for it). Messages name the Secret, never its content.
func checkSSHKey(data []byte, ns string, ref kaov1.SecretKeyReference) error {
	_, err := ssh.ParsePrivateKey(data)
	var passphrase *ssh.PassphraseMissingError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &passphrase):
		return reason.Missing("the SSH private key in Secret %s/%s (key %q, spec.ssh.privateKeySecretRef) is protected by a passphrase: "+
			"runs have no terminal to unlock it; store a key without a passphrase", ns, ref.Name, ref.Key)
	default:
		return reason.Missing("Secret %s/%s (key %q, spec.ssh.privateKeySecretRef) does not hold an SSH private key "+
			"in OpenSSH or PEM format", ns, ref.Name, ref.Key)
	}
}

// checkKnownHosts refuses a known_hosts that pins no key for one of the
// hosts: ssh would refuse that host anyway, after the run started. Hashed
// entries count, as ssh reads them.
func checkKnownHosts(data []byte, hosts []kaov1.Host, ns string, ref kaov1.SecretKeyReference, scratch string) error {
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return err
	}
	file, err := os.CreateTemp(scratch, "known_hosts-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(file.Name()) }()
	if _, err := file.Write(data); err != nil {
		_ = file.Close()
		return err
	}
	if err := file.Close(); err != nil {
		return err
	}
	callback, err := knownhosts.New(file.Name())
	if err != nil {
		return reason.Missing("Secret %s/%s (key %q, spec.ssh.knownHostsSecretRef) is not a known_hosts file ssh can read: %v",
			ns, ref.Name, ref.Key, err)
	}
	// An all-zero key, never a real host's: the answer says whether the
	// host is known at all.
	probe, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		return err
	}
	var missing []string
	for _, h := range hosts {
		port := int(h.Port)
		if port == 0 {
			port = 22
		}
		addr := net.JoinHostPort(h.Address, strconv.Itoa(port))
		remote := &net.TCPAddr{IP: net.ParseIP(h.Address), Port: port}
		err := callback(addr, remote, probe)
		var keyErr *knownhosts.KeyError
		if errors.As(err, &keyErr) && len(keyErr.Want) == 0 {
			missing = append(missing, fmt.Sprintf("%s (%s)", h.Name, knownhosts.Normalize(addr)))
		}
	}
	if len(missing) > 0 {
		return reason.Missing("Secret %s/%s (key %q, spec.ssh.knownHostsSecretRef) pins no host key for %v: "+
			"kao never trusts a host key it has not been given; add the hosts' keys (ssh-keyscan, checked out of band)",
			ns, ref.Name, ref.Key, missing)
	}
	return nil
}

// scratchDir is where input checks may write short-lived files.
func scratchDir(stateDir string) string { return filepath.Join(stateDir, "scratch") }
