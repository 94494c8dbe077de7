package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/internal/sopsfile"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// validateResult is the machine-readable answer of `validate -o json`.
type validateResult struct {
	Valid    bool   `json:"valid"`
	Revision string `json:"revision,omitempty"`
	Files    int    `json:"files"`
	Tenants  int    `json:"tenants"`
	Skipped  int    `json:"skipped"`
	// Undecrypted counts the SOPS-encrypted files checked without their
	// encrypted values, for want of an age key.
	Undecrypted int              `json:"undecrypted,omitempty"`
	Problems    []schema.Problem `json:"problems"`
}

func newValidateCmd() *cobra.Command {
	var (
		output   string
		rev      string
		repo     string
		loopback bool
	)
	cmd := &cobra.Command{
		Use:   "validate [PATH]",
		Short: "Validate a tree of manifests, or the tree of a git commit",
		Long: `Validate reads every *.yaml and *.yml file under PATH (default ".") and
reports every problem it finds, one per line, as file:line:col: path: message.

With --rev, PATH is a path inside the git repository given by --repo (default:
the repository that holds the current directory), and the files are read from
that commit's tree without a checkout. This suits a pre-push hook or a CI step.

The checks are those of a server with default settings: bare-metal machines at
loopback addresses are refused unless --allow-loopback-metal is given, as they
are by a server without that flag.

SOPS-encrypted files are decrypted with the user's age key, found where sops
finds it: SOPS_AGE_KEY, the file SOPS_AGE_KEY_FILE names, and
~/.config/sops/age/keys.txt. Without a key they are checked except for their
encrypted values, and the summary says so.

Exit codes: 0 valid, 1 invalid, 2 usage or I/O error.`,
		Example: `  rezusctl validate examples/openstack
  rezusctl validate --rev HEAD clusters
  rezusctl validate -o json .`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("unknown output format %q: use text or json", output)}
			}
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			opts, err := moduleOptions(cmd, loopback)
			if err != nil {
				return err
			}
			res, err := validate(dir, rev, repo, opts)
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			noteUndecrypted(cmd.ErrOrStderr(), res.Undecrypted)
			if err := printValidate(cmd.OutOrStdout(), cmd.ErrOrStderr(), output, res); err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			if !res.Valid {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().StringVar(&rev, "rev", "", "validate the tree of this git revision (branch, tag or commit) instead of the working tree")
	cmd.Flags().StringVar(&repo, "repo", ".", "the git repository that --rev reads from")
	addLoopbackFlag(cmd.Flags(), &loopback)
	return cmd
}

// loopbackFlag accepts bare-metal machines at loopback addresses in the
// commands that check manifests offline (validate, diff), as the server's
// flag of the same name does.
const loopbackFlag = "allow-loopback-metal"

func addLoopbackFlag(fs *pflag.FlagSet, v *bool) {
	fs.BoolVar(v, loopbackFlag, false, "accept bare-metal machines at loopback addresses, as a server started with --allow-loopback-metal does (tests and the metal demo) (env "+envAllowLoopbackMetal+")")
}

// moduleOptions are the provider modules' settings that the command's
// --allow-loopback-metal (flag, else environment) asks for.
func moduleOptions(cmd *cobra.Command, loopback bool) (render.Options, error) {
	if v := os.Getenv(envAllowLoopbackMetal); v != "" && !flagChanged(cmd, loopbackFlag) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return render.Options{}, &exitError{code: exitUsage, msg: fmt.Sprintf("%s=%q: want true or false", envAllowLoopbackMetal, v)}
		}
		loopback = b
	}
	return render.Options{AllowLoopbackMetal: loopback}, nil
}

// tree is a tree of manifests to read: a directory, or a git commit's tree.
type tree struct {
	fsys     fs.FS
	root     string
	revision string
	// modules check the node groups' providerConfig.
	modules render.Modules
	// display turns a file name in fsys into the one to show the operator.
	display func(string) string
	// decrypt opens SOPS-encrypted files with the user's age key; nil
	// when there is none.
	decrypt *sopsfile.Identities
	// undecrypted counts the encrypted files that check read without
	// decrypt; values are the encrypted values of what it loaded.
	undecrypted int
	values      *encryptedValues
}

// readTree opens dir, or with rev the tree of that revision in the git
// repository repo, where dir is then a path inside the repository; opts
// set up the modules that check it.
func readTree(dir, rev, repo string, opts render.Options) (*tree, error) {
	ids, err := sopsfile.FromEnvironment()
	if err != nil {
		return nil, err
	}
	t := &tree{modules: render.BuiltinWith(opts), decrypt: ids}
	if rev != "" {
		fsys, sha, err := sources.OpenRevision(repo, rev)
		if err != nil {
			return nil, err
		}
		t.fsys, t.root, t.revision = fsys, path.Clean(filepath.ToSlash(dir)), sha
		t.display = func(name string) string { return name }
	} else {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("%s is not a directory", dir)
		}
		t.fsys, t.root = os.DirFS(dir), "."
		t.display = func(name string) string { return filepath.Join(dir, filepath.FromSlash(name)) }
	}
	return t, nil
}

// check loads the tree and runs the checks the server runs before anything
// else: the schema, where encrypted values may be, then the provider
// modules. It returns the desired state
// when the schema accepts the tree (even if a provider module does not),
// and an error only when the tree cannot be read at all.
func (t *tree) check() (*schema.Desired, []schema.Problem, error) {
	opts := &schema.Options{}
	if t.decrypt != nil {
		opts.Decrypt = t.decrypt
	}
	desired, err := schema.Load(t.fsys, t.root, opts)
	var list *schema.ProblemList
	switch {
	case errors.As(err, &list):
		if t.decrypt == nil {
			t.undecrypted = countEncrypted(t.manifests())
		}
		return nil, list.Problems, nil
	case err != nil:
		return nil, nil, err
	}
	t.undecrypted, t.values = desired.Undecrypted, encryptedValuesOf(desired)
	var probs []schema.Problem
	if desired.Undecrypted == 0 {
		// The server's check of where encrypted values may be.
		probs = schema.CheckEncrypted(desired)
	}
	probs = append(probs, t.modules.Validate(desired)...)
	return desired, t.values.told(probs, t.decrypt != nil), nil
}

// sopsFile matches the metadata key that sops writes into every document
// of a file it encrypted.
var sopsFile = regexp.MustCompile(`(?m)^sops:`)

// countEncrypted counts the SOPS-encrypted files of files.
func countEncrypted(files map[string]string) int {
	n := 0
	for _, data := range files {
		if sopsFile.MatchString(data) {
			n++
		}
	}
	return n
}

// manifests returns the contents of the tree's manifests by path, for an
// upload.
func (t *tree) manifests() map[string]string {
	files := map[string]string{}
	_ = fs.WalkDir(t.fsys, t.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if ext := path.Ext(p); ext == ".yaml" || ext == ".yml" {
			if b, err := fs.ReadFile(t.fsys, p); err == nil {
				files[p] = string(b)
			}
		}
		return nil
	})
	return files
}

// validate loads the manifests and collects their problems. It returns an
// error only when the input cannot be read at all.
func validate(dir, rev, repo string, opts render.Options) (*validateResult, error) {
	t, err := readTree(dir, rev, repo, opts)
	if err != nil {
		return nil, err
	}
	res := &validateResult{Revision: t.revision}
	desired, probs, err := t.check()
	if err != nil {
		return nil, err
	}
	if desired != nil {
		res.Files, res.Tenants, res.Skipped = desired.Files, len(desired.Tenants), desired.Skipped
	}
	res.Undecrypted = t.undecrypted
	res.Problems = probs
	for i := range res.Problems {
		res.Problems[i].File = t.display(res.Problems[i].File)
	}
	if res.Problems == nil {
		res.Problems = []schema.Problem{}
	}
	res.Valid = len(res.Problems) == 0
	return res, nil
}

// printValidate writes problems compiler-style to w, one per line, and the
// summary to summary, so that w holds only what an editor can jump to.
func printValidate(w, summary io.Writer, format string, res *validateResult) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	for _, p := range res.Problems {
		if _, err := fmt.Fprintln(w, p.String()); err != nil {
			return err
		}
	}
	if res.Valid {
		_, err := fmt.Fprintf(summary, "valid: %d files, %d tenants, %d documents of other apiVersions skipped\n", res.Files, res.Tenants, res.Skipped)
		return err
	}
	_, err := fmt.Fprintf(summary, "invalid: %d problems\n", len(res.Problems))
	return err
}
