package runner

import (
	_ "embed"
)

// Ansible compiles a template again in every worker process that renders
// it: a role variable that forty tasks read is compiled forty times per host.
// plugins/callback/kao_jinja_cache.py keeps the compiled code in a directory
// private to the run, so that the run's processes share it. Every run gets
// the plugin in its own directory and the cache beside it; the cache is
// removed with the run's secrets when the run ends, or by the next leader's
// sweep (internal/controller/pipeline) after a crash.
const (
	// pluginsDir holds the Ansible plugins kao writes into a run's directory.
	pluginsDir = "plugins"
	// JinjaCacheDir is the run's cache of compiled templates.
	JinjaCacheDir = "jinja-cache"
	// jinjaCachePlugin is the callback plugin's file, and jinjaCacheCallback
	// the name ansible.cfg enables it by.
	jinjaCachePlugin   = "kao_jinja_cache.py"
	jinjaCacheCallback = "kao_jinja_cache"
	// JinjaCacheEnv names the cache directory to the plugin; without it the
	// plugin does nothing.
	JinjaCacheEnv = "KAO_JINJA_CACHE_DIR"
)

//go:embed plugins/callback/kao_jinja_cache.py
var jinjaCacheSource []byte
