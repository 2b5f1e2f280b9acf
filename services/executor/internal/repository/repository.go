package repository

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Model is one model directory of a repository.
type Model struct {
	// Name is the directory name, which is also the model name.
	Name string
	// Dir is the model directory.
	Dir string
	// Config is the normalized configuration; nil when it failed to load.
	Config *inference.ModelConfig
	// Versions are the versions the version policy selects, ascending.
	Versions []int64
	// Err says why the model cannot be served (a *tritonerr.Error), or nil.
	Err error
}

// VersionDir is the directory of version v.
func (m Model) VersionDir(v int64) string {
	return filepath.Join(m.Dir, strconv.FormatInt(v, 10))
}

// Scan lists the models under root, sorted by name. The error is for the
// repository itself (root missing or unreadable); problems of single models
// are in their Err.
func Scan(root string) ([]Model, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, tritonerr.Internalf("failed to read model repository '%s': %v", root, unwrapPath(err))
	}
	var models []Model
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		// Follow symlinks: a repository may link model directories in.
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		models = append(models, ScanModel(dir))
	}
	sort.Slice(models, func(i, j int) bool { return models[i].Name < models[j].Name })
	return models, nil
}

// ScanModel loads one model directory: its configuration and the versions
// its policy selects.
func ScanModel(dir string) Model {
	m := Model{Name: filepath.Base(filepath.Clean(dir)), Dir: dir}
	cfg, err := modelconfig.Load(dir)
	if err != nil {
		m.Err = err
		return m
	}
	return WithConfig(dir, cfg)
}

// WithConfig is ScanModel with the configuration already loaded (an
// override sent with a repository load request).
func WithConfig(dir string, cfg *inference.ModelConfig) Model {
	m := Model{Name: filepath.Base(filepath.Clean(dir)), Dir: dir, Config: cfg}
	m.Versions, m.Err = selectVersions(m.Name, cfg.GetVersionPolicy(), onDisk(dir))
	return m
}

// onDisk returns the version directories of a model, ascending. Only
// canonical decimal names count ("1", "20"; not "01", "-1" or "v1"), so a
// version maps back to exactly one directory.
func onDisk(dir string) []int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var versions []int64
	for _, e := range entries {
		v, ok := parseVersion(e.Name())
		if !ok {
			continue
		}
		if st, err := os.Stat(filepath.Join(dir, e.Name())); err != nil || !st.IsDir() {
			continue
		}
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	return versions
}

func parseVersion(name string) (int64, bool) {
	if name == "" || (len(name) > 1 && name[0] == '0') {
		return 0, false
	}
	for _, c := range name {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(name, 10, 64)
	return v, err == nil
}

// selectVersions applies a version policy to the versions on disk, as
// Triton's VersionsToLoad does. One difference: Triton only logs a specific
// version whose directory is missing and serves the others; here it is an
// error on the model, so the repository index shows the mistake.
func selectVersions(model string, policy *inference.ModelVersionPolicy, disk []int64) ([]int64, error) {
	var out []int64
	switch {
	case policy.GetSpecific() != nil:
		present := map[int64]bool{}
		for _, v := range disk {
			present[v] = true
		}
		seen := map[int64]bool{}
		for _, v := range policy.GetSpecific().GetVersions() {
			if !present[v] {
				return nil, tritonerr.InvalidArgf("version %d is specified for model '%s', but the version directory is not present", v, model)
			}
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	case policy.GetAll() != nil:
		out = append(out, disk...)
	default: // latest, the default policy
		n := 1
		if l := policy.GetLatest(); l != nil {
			n = int(l.GetNumVersions())
		}
		if n > len(disk) {
			n = len(disk)
		}
		out = append(out, disk[len(disk)-n:]...)
	}
	if len(out) == 0 {
		return nil, tritonerr.InvalidArgf("at least one version must be available under the version policy of model '%s'", model)
	}
	return out, nil
}

// unwrapPath drops the "open ROOT:" part of a *fs.PathError; the message
// already names the repository.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
