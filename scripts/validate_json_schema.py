#!/usr/bin/env python3
"""Checks generated JSON against its schema with python3-jsonschema (an independent validator).

Input (a file, or stdin): one JSON object per line, {"schema": ..., "output": "<generated text>",
"label": "..."}. Prints one line per failure and exits 1 if any output does not parse or validate.
"""
import json
import sys

import jsonschema


def main():
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    failures = total = 0
    for line in src:
        if not line.strip():
            continue
        case = json.loads(line)
        total += 1
        try:
            value = json.loads(case["output"])
            validator = jsonschema.validators.validator_for(case["schema"])
            # The format checker of the schema's own draft (the generic one mixes in draft 3's "time").
            validator(case["schema"], format_checker=validator.FORMAT_CHECKER).validate(value)
        except Exception as e:  # parse errors and validation errors alike
            failures += 1
            print(f"FAIL {case.get('label', '')}: {type(e).__name__}: {str(e).splitlines()[0]} | output={case['output']!r}")
    print(f"{total - failures}/{total} valid")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
