package karmadadeployment

import (
	"errors"
	"os"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kao-io/kao/internal/controller/pipeline"
)

// removeDeploymentState removes what the state directory holds of one
// deployment: its run directories and its fact cache. Backups are kept:
// snapshots outlive the objects they were taken of.
func removeDeploymentState(stateDir string, uid types.UID) error {
	if stateDir == "" || uid == "" {
		return nil
	}
	return errors.Join(os.RemoveAll(pipeline.RunsDir(stateDir, uid)), os.RemoveAll(pipeline.FactsDir(stateDir, uid)))
}
