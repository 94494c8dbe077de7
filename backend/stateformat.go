package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// stateHead holds the raw top-level members the backend reads of a TF
// state: those that tell a state from other bytes and that the guards
// compare.
type stateHead struct {
	version, serial, lineage, encryptionVersion, encryptedData []byte
}

// parseState checks that body is a TF state the backend may store and
// returns its serial and lineage. Two shapes are accepted:
//
//   - a plain state (tofu or terraform): a JSON object with an integer
//     version, an integer serial of 0 or more and a non-empty lineage;
//   - OpenTofu's encrypted state: a JSON object with a non-empty
//     encryption_version, encrypted_data as a string, and serial and
//     lineage in clear text as above.
//
// The whole body must be valid JSON. Members are matched as Go's
// encoding/json, which tofu and terraform read states with, matches them:
// case-insensitively, the last of duplicates winning; so the backend
// reads the serial and lineage they will. The error says what is wrong.
func parseState(body []byte) (serial uint64, lineage string, err error) {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		if !json.Valid(body) {
			return 0, "", errors.New("the body is not JSON")
		}
		return 0, "", errors.New("the body is JSON but not an object")
	}
	if !json.Valid(body) {
		// Unmarshal checks the whole body before it decodes anything,
		// and says where it is broken.
		err := json.Unmarshal(body, &struct{}{})
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return 0, "", fmt.Errorf("the body is not valid JSON at byte %d: %v", se.Offset, se)
		}
		return 0, "", errors.New("the body is not valid JSON")
	}
	h, err := readStateHead(body)
	if err != nil {
		return 0, "", err
	}
	if h.encryptionVersion != nil && string(h.encryptionVersion) != "null" {
		var v, data string
		if json.Unmarshal(h.encryptionVersion, &v) != nil || v == "" {
			return 0, "", errors.New("encryption_version must be a non-empty string")
		}
		if json.Unmarshal(h.encryptedData, &data) != nil {
			return 0, "", errors.New("an encrypted state needs encrypted_data as a string")
		}
	} else if _, err := wholeNumber(h.version, "version"); err != nil {
		return 0, "", err
	}
	if serial, err = wholeNumber(h.serial, "serial"); err != nil {
		return 0, "", err
	}
	if json.Unmarshal(h.lineage, &lineage) != nil || lineage == "" {
		return 0, "", errors.New("lineage must be a non-empty string")
	}
	return serial, lineage, nil
}

// readStateHead walks the top-level members of body, a valid JSON object,
// with eachMember and keeps the raw values of those parseState reads. The
// other values are skipped without decoding: a large state's resources
// cost one pass.
func readStateHead(body []byte) (stateHead, error) {
	var h stateHead
	err := eachMember(body, func(m member) bool {
		var key string
		if json.Unmarshal(m.key, &key) != nil {
			return true
		}
		v := body[m.value:m.end]
		switch {
		case strings.EqualFold(key, "version"):
			h.version = v
		case strings.EqualFold(key, "serial"):
			h.serial = v
		case strings.EqualFold(key, "lineage"):
			h.lineage = v
		case strings.EqualFold(key, "encryption_version"):
			h.encryptionVersion = v
		case strings.EqualFold(key, "encrypted_data"):
			h.encryptedData = v
		}
		return true
	})
	if err != nil {
		return h, fmt.Errorf("the body's members cannot be read: %v", err)
	}
	return h, nil
}

// wholeNumber reads a JSON integer of 0 or more.
func wholeNumber(raw []byte, what string) (uint64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, fmt.Errorf("it has no %s", what)
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s is not a whole number", what, raw)
	}
	return n, nil
}
