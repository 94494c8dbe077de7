package schema

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

//go:embed tenant.schema.json nodegroup.schema.json configpatch.schema.json
var schemaFS embed.FS

// schemaFiles maps each kind that can be declared in git to its JSON Schema.
var schemaFiles = map[string]string{
	KindTenant:      "tenant.schema.json",
	KindNodeGroup:   "nodegroup.schema.json",
	KindConfigPatch: "configpatch.schema.json",
}

// Files returns the JSON Schemas (draft 2020-12) of the kinds that can be
// declared in git: tenant.schema.json, nodegroup.schema.json and
// configpatch.schema.json, the same bytes as the files in the repository.
func Files() fs.FS { return schemaFS }

// SchemaFile returns the name, within Files, of the JSON Schema of kind, or ""
// when kind cannot be declared in git.
func SchemaFile(kind string) string { return schemaFiles[kind] }

// kindSchema is one compiled JSON Schema and its raw form, which explains
// schema errors (the known fields of an object, for "did you mean").
type kindSchema struct {
	compiled *jsonschema.Schema
	raw      map[string]any
}

var schemas struct {
	once   sync.Once
	byKind map[string]*kindSchema
	err    error
}

// compiledSchemas compiles the embedded schemas once per process.
func compiledSchemas() (map[string]*kindSchema, error) {
	schemas.once.Do(func() {
		schemas.byKind, schemas.err = compileSchemas()
	})
	return schemas.byKind, schemas.err
}

func compileSchemas() (map[string]*kindSchema, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	byKind := make(map[string]*kindSchema, len(schemaFiles))
	for kind, name := range schemaFiles {
		data, err := schemaFS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var raw map[string]any
		if err := json.Unmarshal(data, &raw); err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		if err := c.AddResource(name, bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		byKind[kind] = &kindSchema{raw: raw}
	}
	for kind, name := range schemaFiles {
		s, err := c.Compile(name)
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		byKind[kind].compiled = s
	}
	return byKind, nil
}
