package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// envPrefix starts the environment variable of every setting: --data is
// REZUSCLOUD_DATA, --tokens-file is REZUSCLOUD_TOKENS_FILE.
const envPrefix = "REZUSCLOUD_"

// configFlag names the flag that points at the YAML config file.
const configFlag = "config"

func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// documentEnv appends its environment variable to every flag's help.
func documentEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		f.Usage += fmt.Sprintf(" [env %s]", envName(f.Name))
	})
}

// applyConfig gives every flag that the command line left unset its value
// from the environment or, failing that, from the config file; flags set
// nowhere keep their defaults. So the precedence is flag > env > file >
// default. The config file is YAML whose keys are flag names.
func applyConfig(fs *pflag.FlagSet, getenv func(string) string) error {
	var path string
	if f := fs.Lookup(configFlag); f != nil {
		path = f.Value.String()
		if !f.Changed {
			if v := getenv(envName(configFlag)); v != "" {
				path = v
			}
		}
	}
	file := map[string]any{}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		if err := yaml.UnmarshalStrict(data, &file); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		var unknown []string
		for k := range file {
			if f := fs.Lookup(k); f == nil || k == configFlag || k == "help" {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fmt.Errorf("config file %s: unknown setting %s (keys are flag names; see --help)", path, strings.Join(unknown, ", "))
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == configFlag || f.Name == "help" {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, e)
			}
			return
		}
		raw, ok := file[f.Name]
		if !ok || raw == nil {
			return
		}
		v, e := scalar(raw)
		if e == nil {
			e = f.Value.Set(v)
		}
		if e != nil {
			err = fmt.Errorf("config file %s: %s: %w", path, f.Name, e)
		}
	})
	return err
}

// scalar turns a YAML scalar into the text a flag parses.
func scalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("want a string, number or boolean, not %T", v)
}
