"""The Avro contract: every shipped schema version, schemas/vN/<subject>.avsc, kept forever."""
