package reason

import (
	"errors"
	"fmt"
	"testing"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

func TestConstructors(t *testing.T) {
	cases := []struct {
		err           *Error
		reason        string
		kind          Kind
		after         time.Duration
		secretMissing bool
		message       string
	}{
		{Missing("Secret %s/%s does not exist", "ns", "s"), kaov1.PrerequisitesMissingReason, Retry, 0, false, "Secret ns/s does not exist"},
		{SecretMissing("no key %q", "k"), kaov1.PrerequisitesMissingReason, Retry, 0, true, `no key "k"`},
		{Failed(kaov1.UserRoleInvalidReason, "bad role"), kaov1.UserRoleInvalidReason, Retry, 0, false, "bad role"},
		{Pending(kaov1.ExposurePendingReason, 5*time.Second, "no address"), kaov1.ExposurePendingReason, Wait, 5 * time.Second, false, "no address"},
		{Refused(kaov1.ChecksumMismatchReason, "mismatch"), kaov1.ChecksumMismatchReason, Refuse, 0, false, "mismatch"},
	}
	for _, c := range cases {
		e := c.err
		if e.Reason != c.reason || e.Kind != c.kind || e.After != c.after || e.Error() != c.message {
			t.Errorf("%+v: want reason %s, kind %d, after %s, message %q", e, c.reason, c.kind, c.after, c.message)
		}
		if got := errors.Is(e, ErrSecretMissing); got != c.secretMissing {
			t.Errorf("%q: errors.Is(ErrSecretMissing) = %v", e.Message, got)
		}
	}
}

func TestAWaitAlwaysLooksAgain(t *testing.T) {
	if got := Pending(kaov1.WaitingForRunReason, 0, "busy").After; got != DefaultWait {
		t.Errorf("a Wait without After looks again after %s, want %s", got, DefaultWait)
	}
}

func TestFromFindsTheErrorInAChain(t *testing.T) {
	inner := Missing("gone")
	got, ok := From(fmt.Errorf("building the run: %w", inner))
	if !ok || got != inner {
		t.Fatalf("From = %v, %v", got, ok)
	}
	if _, ok := From(errors.New("plain")); ok {
		t.Error("From found an *Error in a plain error")
	}
}
