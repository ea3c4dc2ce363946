// A JSON Schema validator for the keywords the e2e tests' schemas use (structured.test.mjs's
// random schemas, tools.test.mjs's function parameters): type object (properties, required,
// additionalProperties false), array (items, minItems, maxItems), string (minLength, maxLength),
// integer (minimum, maximum), boolean, enum, const, anyOf and $ref into $defs. Independent of the
// server's converter, so a grammar bug shows up as an invalid answer.

export function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object")
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
  return JSON.stringify(v);
}

// Returns "" when `v` is valid, else where and why not.
export function validate(schema, v, root, at = "$") {
  if (schema.$ref) return validate(root.$defs[schema.$ref.slice("#/$defs/".length)], v, root, at);
  if ("const" in schema) return canonical(v) === canonical(schema.const) ? "" : `${at}: not the const`;
  if (schema.enum) return schema.enum.some((e) => canonical(e) === canonical(v)) ? "" : `${at}: not in enum`;
  if (schema.anyOf) {
    const errs = schema.anyOf.map((s) => validate(s, v, root, at));
    return errs.includes("") ? "" : `${at}: no anyOf branch: ${errs.join("; ")}`;
  }
  switch (schema.type) {
    case "object": {
      if (!v || typeof v !== "object" || Array.isArray(v)) return `${at}: not an object`;
      for (const k of schema.required) if (!(k in v)) return `${at}: missing ${k}`;
      for (const k of Object.keys(v)) {
        if (!(k in schema.properties)) return `${at}: extra key ${k}`;
        const e = validate(schema.properties[k], v[k], root, `${at}.${k}`);
        if (e) return e;
      }
      return "";
    }
    case "array": {
      if (!Array.isArray(v)) return `${at}: not an array`;
      if (v.length < schema.minItems || v.length > schema.maxItems) return `${at}: ${v.length} items`;
      for (let i = 0; i < v.length; ++i) {
        const e = validate(schema.items, v[i], root, `${at}[${i}]`);
        if (e) return e;
      }
      return "";
    }
    case "string": {
      if (typeof v !== "string") return `${at}: not a string`;
      const n = [...v].length;
      if (n > schema.maxLength || n < (schema.minLength ?? 0)) return `${at}: length ${n}`;
      return "";
    }
    case "integer":
      if (!Number.isInteger(v)) return `${at}: not an integer`;
      return v >= schema.minimum && v <= schema.maximum ? "" : `${at}: ${v} out of range`;
    case "boolean":
      return typeof v === "boolean" ? "" : `${at}: not a boolean`;
    default:
      return `${at}: the validator does not know ${JSON.stringify(schema)}`;
  }
}
