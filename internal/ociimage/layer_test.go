package ociimage

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestCompressionNamesTheModule checks that Compression names the version
// of github.com/klauspost/compress that go.mod pins.
func TestCompressionNamesTheModule(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/klauspost/compress (v\S+)`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatal("go.mod does not require github.com/klauspost/compress, which compresses the layers")
	}
	if want := "github.com/klauspost/compress " + m[1] + " "; !strings.HasPrefix(Compression, want) {
		t.Errorf("Compression is %q; go.mod pins github.com/klauspost/compress %s", Compression, m[1])
	}
}
