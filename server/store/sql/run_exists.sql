-- Whether run $1 exists (a fence error says NOT_FOUND rather than "lease lost" when it does not).
SELECT 1 FROM runs WHERE id = $1
