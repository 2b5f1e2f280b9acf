package repository

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func TestScan(t *testing.T) {
	root := filepath.Join("testdata", "repo1")
	models, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		versions  []int64
		err       string
		hasConfig bool
	}{
		{name: "all", versions: []int64{1, 2, 3, 10}, hasConfig: true},
		{name: "broken", err: "'max_batch_size' must be non-negative value for broken"},
		{name: "latest1", versions: []int64{10}, hasConfig: true},
		{name: "latest2", versions: []int64{3, 10}, hasConfig: true},
		{name: "noversions", err: "at least one version must be available under the version policy of model 'noversions'", hasConfig: true},
		{name: "specific", versions: []int64{1, 3}, hasConfig: true},
		{name: "specific_missing", err: "version 4 is specified for model 'specific_missing', but the version directory is not present", hasConfig: true},
		{name: "unparsable", err: "failed to read text proto from testdata/repo1/unparsable/config.pbtxt: (line 2:1): unknown field: not"},
	}
	if len(models) != len(tests) {
		names := []string{}
		for _, m := range models {
			names = append(names, m.Name)
		}
		t.Fatalf("got models %v, want %d", names, len(tests))
	}
	for i, tt := range tests {
		m := models[i]
		t.Run(tt.name, func(t *testing.T) {
			if m.Name != tt.name || m.Dir != filepath.Join(root, tt.name) {
				t.Fatalf("model %d is %q in %q", i, m.Name, m.Dir)
			}
			if (m.Config != nil) != tt.hasConfig {
				t.Errorf("config present = %v, want %v", m.Config != nil, tt.hasConfig)
			}
			if tt.err != "" {
				if m.Err == nil || !strings.Contains(m.Err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", m.Err, tt.err)
				}
				if tritonerr.From(m.Err) == nil {
					t.Errorf("err %T is not a tritonerr", m.Err)
				}
				return
			}
			if m.Err != nil {
				t.Fatalf("unexpected err %v", m.Err)
			}
			if !reflect.DeepEqual(m.Versions, tt.versions) {
				t.Errorf("versions %v, want %v", m.Versions, tt.versions)
			}
			if m.Config.Name != tt.name {
				t.Errorf("config name %q", m.Config.Name)
			}
			for _, v := range m.Versions {
				if st, err := os.Stat(m.VersionDir(v)); err != nil || !st.IsDir() {
					t.Errorf("VersionDir(%d) = %s: %v", v, m.VersionDir(v), err)
				}
			}
		})
	}
}

func TestScanMissingRoot(t *testing.T) {
	_, err := Scan(filepath.Join(t.TempDir(), "nope"))
	if err == nil || !strings.Contains(err.Error(), "failed to read model repository") {
		t.Fatalf("err %v", err)
	}
}

// TestScanSymlinkedModel: repositories often link model directories in.
func TestScanSymlinkedModel(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink(mustAbs(t, filepath.Join("testdata", "repo1", "latest2")), filepath.Join(root, "latest2")); err != nil {
		t.Skip("symlinks unavailable:", err)
	}
	models, err := Scan(root)
	if err != nil || len(models) != 1 || models[0].Err != nil || !reflect.DeepEqual(models[0].Versions, []int64{3, 10}) {
		t.Fatalf("models %+v, err %v", models, err)
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestSelectVersions(t *testing.T) {
	latest := func(n uint32) *inference.ModelVersionPolicy {
		return &inference.ModelVersionPolicy{PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: n}}}
	}
	specific := func(v ...int64) *inference.ModelVersionPolicy {
		return &inference.ModelVersionPolicy{PolicyChoice: &inference.ModelVersionPolicy_Specific_{Specific: &inference.ModelVersionPolicy_Specific{Versions: v}}}
	}
	all := &inference.ModelVersionPolicy{PolicyChoice: &inference.ModelVersionPolicy_All_{All: &inference.ModelVersionPolicy_All{}}}
	tests := []struct {
		name   string
		policy *inference.ModelVersionPolicy
		disk   []int64
		want   []int64
		err    string
	}{
		{"nil policy is latest 1", nil, []int64{1, 5}, []int64{5}, ""},
		{"latest more than present", latest(9), []int64{1, 5}, []int64{1, 5}, ""},
		{"latest 0 serves nothing", latest(0), []int64{1}, nil, "at least one version"},
		{"all", all, []int64{2, 4}, []int64{2, 4}, ""},
		{"all of nothing", all, nil, nil, "at least one version"},
		{"specific sorted and deduplicated", specific(4, 2, 4), []int64{1, 2, 4}, []int64{2, 4}, ""},
		{"specific missing", specific(2, 7), []int64{2}, nil, "version 7 is specified for model 'm', but the version directory is not present"},
		{"specific empty", specific(), []int64{2}, nil, "at least one version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := selectVersions("m", tt.policy, tt.disk)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				if tritonerr.KindOf(err) != tritonerr.InvalidArg {
					t.Errorf("kind %v", tritonerr.KindOf(err))
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	for name, want := range map[string]bool{"1": true, "0": true, "42": true, "01": false, "-1": false, "+1": false, "1a": false, "": false, "99999999999999999999": false} {
		if _, ok := parseVersion(name); ok != want {
			t.Errorf("parseVersion(%q) ok = %v", name, ok)
		}
	}
}

func TestStamp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	for _, p := range []string{"1", "2/sub"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	at := func(p string, sec int64) {
		t.Helper()
		path := filepath.Join(dir, p)
		if _, err := os.Stat(path); err != nil {
			if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		when := time.Unix(sec, 0)
		if err := os.Chtimes(path, when, when); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"config.pbtxt", "1/model.bin", "1", "2/sub/w.bin", "2/sub", "2", ""} {
		at(p, 100)
	}
	base1, base2 := Stamp(dir, 1), Stamp(dir, 2)
	if base1 != time.Unix(100, 0).UnixNano() || base2 != base1 {
		t.Fatalf("stamps %d %d, want both at 100s", base1, base2)
	}
	steps := []struct {
		touch              string
		changed1, changed2 bool
	}{
		{"config.pbtxt", false, false}, // compared as a configuration instead
		{"2/sub/w.bin", false, true},   // a file deep in version 2
		{"1/model.bin", true, false},
		{"labels.txt", true, true}, // the model's own files concern every version
	}
	sec := int64(200)
	for _, s := range steps {
		at(s.touch, sec)
		sec += 100
		s1, s2 := Stamp(dir, 1), Stamp(dir, 2)
		if (s1 != base1) != s.changed1 || (s2 != base2) != s.changed2 {
			t.Fatalf("after touching %s: version 1 changed %v, version 2 changed %v; want %v, %v", s.touch, s1 != base1, s2 != base2, s.changed1, s.changed2)
		}
		base1, base2 = s1, s2
	}
	if got := Stamp(filepath.Join(dir, "missing"), 1); got != 0 {
		t.Fatalf("stamp of a missing model: %d", got)
	}
}
