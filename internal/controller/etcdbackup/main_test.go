package etcdbackup

import (
	"os"
	"testing"

	"github.com/kao-io/kao/internal/controller/controllertest"
)

func TestMain(m *testing.M) { os.Exit(controllertest.Main(m)) }
