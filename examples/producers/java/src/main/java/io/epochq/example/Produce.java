// Submits one epochq job from Java: a SubmitJob CommandEnvelope in Avro single-object encoding
// (org.apache.avro, GenericRecord), produced with kafka-clients (its default partitioner is the
// murmur2 one epochq requires; idempotent, acks=all), after registering its writer schema in
// <ns>.schemas. The guide: docs/producing.md.
//
//   java -jar target/epochq-produce.jar [-schemas DIR] [-label k=v ...] [-signing-key PEM_FILE]
//        BOOTSTRAP NAMESPACE TASK_TYPE TENANT PAYLOAD_JSON
//
// -signing-key (or EPOCHQ_SIGNING_KEY_FILE): the tenant's Ed25519 private key (PKCS#8 PEM); the
// record then carries the epochq-signature header (docs/contract.md, "Signing a command").
//
// Prints the job id and partition as one JSON line: {"job_id":"...","partition":2}.
package io.epochq.example;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.Signature;
import java.security.spec.PKCS8EncodedKeySpec;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class Produce {
    private static final String USAGE = "usage: epochq-produce [-schemas DIR] [-label k=v] [-signing-key PEM_FILE]"
            + " BOOTSTRAP NAMESPACE TASK_TYPE TENANT PAYLOAD_JSON";

    /** The command line: flags first, then the five arguments (as Go's flag package reads them). */
    record Options(Path schemas, Map<String, String> labels, String signingKey, List<String> args) {}

    public static void main(String[] argv) {
        try {
            run(parse(utf8Arguments(argv)));
        } catch (Exception e) {
            System.err.println("epochq-produce: " + oneLine(e));
            System.exit(1);
        }
    }

    /** An error and its causes as one line: "Failed to construct kafka producer: <why>". */
    static String oneLine(Throwable error) {
        StringBuilder line = new StringBuilder();
        for (Throwable t = error; t != null; t = t.getCause() == t ? null : t.getCause()) {
            String message = t instanceof NoSuchFileException ? t.getMessage() + ": no such file"
                    : t.getMessage() != null ? t.getMessage() : t.getClass().getSimpleName();
            if (t instanceof ExecutionException || line.indexOf(message) >= 0) {
                continue; // the wrapper repeats its cause
            }
            line.append(line.length() > 0 ? ": " : "").append(message.replace('\n', ' '));
        }
        return line.toString();
    }

    static void run(Options options) throws Exception {
        if (options.args().size() != 5) {
            throw new IllegalArgumentException(USAGE);
        }
        List<String> a = options.args();
        String bootstrap = a.get(0), namespace = a.get(1), taskType = a.get(2), tenant = a.get(3), payload = a.get(4);
        requireJson(payload);
        Path schemaFile = latestCommandSchema(options.schemas());
        Schema schema = new Schema.Parser().parse(schemaFile.toFile());
        String jobId = UUID.randomUUID().toString();
        byte[] value = singleObject(schema, envelope(schema, jobId, tenant, taskType, payload, options.labels()));

        String topic = namespace + ".commands";
        ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, jobId.getBytes(StandardCharsets.UTF_8), value);
        if (!options.signingKey().isEmpty()) {
            record.headers().add("epochq-signature", sign(Paths.get(options.signingKey()), topic, value));
        }
        ProducerRecord<byte[], byte[]> registration = registration(namespace, schemaFile, value);
        requireTopic(bootstrap, registration.topic()); // a producer could create it, uncompacted, on some brokers
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig(bootstrap))) {
            // Register the writer schema before writing with it: readers of any age find it by fingerprint.
            producer.send(registration).get(30, TimeUnit.SECONDS);
            RecordMetadata sent = producer.send(record).get(30, TimeUnit.SECONDS);
            System.out.println("{\"job_id\":\"" + jobId + "\",\"partition\":" + sent.partition() + "}");
        }
    }

    /** acks=all, idempotent; no partitioner set: the default hashes the key with murmur2, as epochq requires. */
    static Properties producerConfig(String bootstrap) {
        Properties config = new Properties();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ProducerConfig.ACKS_CONFIG, "all");
        config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        config.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30_000); // not delivered by then: not submitted
        config.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 20_000);
        config.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30_000);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        return config;
    }

    /** The CommandEnvelope with a SubmitJob body; fields the schema version lacks (labels before v2) are not written. */
    static GenericRecord envelope(Schema schema, String jobId, String tenant, String taskType, String payload,
                                  Map<String, String> labels) {
        Schema submitSchema = schema.getField("body").schema().getTypes().stream()
                .filter(s -> s.getFullName().equals("io.epochq.command.SubmitJob")).findFirst().orElseThrow();
        Schema payloadSchema = submitSchema.getField("payload").schema();
        GenericRecord data = new GenericRecordBuilder(payloadSchema)
                // The payload bytes go as given: big integers keep every digit.
                .set("data", ByteBuffer.wrap(payload.getBytes(StandardCharsets.UTF_8)))
                .set("content_type", "application/json")
                .set("schema_name", "")
                .set("schema_version", 1)
                .build();
        GenericRecordBuilder submit = new GenericRecordBuilder(submitSchema)
                .set("task_type", taskType).set("payload", data).set("priority", 5);
        if (submitSchema.getField("labels") != null) {
            submit.set("labels", labels);
        }
        Instant now = Instant.now();
        return new GenericRecordBuilder(schema)
                .set("command_id", UUID.randomUUID().toString())
                .set("job_id", jobId)
                .set("tenant_id", tenant)
                .set("issued_at", ChronoUnit.MICROS.between(Instant.EPOCH, now)) // timestamp-micros
                .set("body", submit.build()) // the union branch: GenericData resolves it by the record's schema
                .build();
    }

    /** C3 01 + CRC-64-AVRO fingerprint of the Parsing Canonical Form (little-endian) + the Avro binary body. */
    static byte[] singleObject(Schema schema, GenericRecord value) throws IOException {
        ByteBuffer encoded = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), schema).encode(value);
        byte[] bytes = new byte[encoded.remaining()];
        encoded.get(bytes);
        return bytes;
    }

    /** The record of <ns>.schemas registering the writer schema: key = the fingerprint (bytes 2-9) in hex, value = the schema. */
    static ProducerRecord<byte[], byte[]> registration(String namespace, Path schemaFile, byte[] value) throws IOException {
        byte[] key = HexFormat.of().formatHex(value, 2, 10).getBytes(StandardCharsets.UTF_8);
        ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(namespace + ".schemas", key, Files.readAllBytes(schemaFile));
        record.headers().add("subject", "command".getBytes(StandardCharsets.UTF_8))
                .add("version", schemaFile.getParent().getFileName().toString().substring(1).getBytes(StandardCharsets.UTF_8));
        return record;
    }

    /** Refuse, in one line, a namespace whose topic does not exist (made before it existed: run epochq topics ensure). */
    static void requireTopic(String bootstrap, String topic) throws Exception {
        Properties config = new Properties();
        config.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(config)) {
            admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof UnknownTopicOrPartitionException) {
                throw new IllegalStateException(topic + " is missing: run `epochq topics ensure`");
            }
            throw e;
        }
    }

    /** The newest schemas/vN/command.avsc (the engine reads every older one too). */
    static Path latestCommandSchema(Path root) throws IOException {
        try (Stream<Path> dirs = Files.list(root)) {
            return dirs.filter(d -> d.getFileName().toString().matches("v\\d+"))
                    .filter(d -> Files.exists(d.resolve("command.avsc")))
                    .max(Comparator.comparingInt(d -> Integer.parseInt(d.getFileName().toString().substring(1))))
                    .map(d -> d.resolve("command.avsc"))
                    .orElseThrow(() -> new IOException("no v*/command.avsc under " + root));
        }
    }

    /** The epochq-signature of a command record: Ed25519 over "epochq-command-v1" 0x00 topic 0x00 value. */
    static byte[] sign(Path keyFile, String topic, byte[] value) throws Exception {
        Signature signer = Signature.getInstance("Ed25519");
        signer.initSign(privateKey(keyFile));
        signer.update(("epochq-command-v1\0" + topic + "\0").getBytes(StandardCharsets.UTF_8));
        signer.update(value);
        return signer.sign();
    }

    /** The Ed25519 key in a PKCS#8 PEM file ("-----BEGIN PRIVATE KEY-----", as openssl genpkey writes it). */
    static PrivateKey privateKey(Path keyFile) throws Exception {
        String text = Files.readString(keyFile, StandardCharsets.US_ASCII);
        int begin = text.indexOf("-----BEGIN PRIVATE KEY-----"), end = text.indexOf("-----END PRIVATE KEY-----");
        if (begin < 0 || end < begin) {
            throw new IllegalArgumentException(keyFile + ": not a PKCS#8 PEM private key (BEGIN PRIVATE KEY)");
        }
        String base64 = text.substring(begin + 27, end).replaceAll("\\s", "");
        try {
            return KeyFactory.getInstance("Ed25519").generatePrivate(
                    new PKCS8EncodedKeySpec(Base64.getDecoder().decode(base64)));
        } catch (Exception e) {
            throw new IllegalArgumentException(keyFile + ": not an Ed25519 key (" + e.getMessage() + ")", e);
        }
    }

    static void requireJson(String payload) {
        try {
            new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS).readTree(payload);
        } catch (IOException e) {
            throw new IllegalArgumentException("payload is not valid JSON");
        }
        if (payload.isBlank()) {
            throw new IllegalArgumentException("payload is not valid JSON");
        }
    }

    /** Flags before the arguments (-name value, -name=value, --name too); "--" ends them. */
    static Options parse(String[] argv) throws IOException {
        Path schemas = defaultSchemas();
        Map<String, String> labels = new LinkedHashMap<>();
        String signingKey = System.getenv().getOrDefault("EPOCHQ_SIGNING_KEY_FILE", "");
        int i = 0;
        for (; i < argv.length && argv[i].startsWith("-") && argv[i].length() > 1; i++) {
            if (argv[i].equals("--")) {
                i++;
                break;
            }
            String flag = argv[i].replaceFirst("^--?", "");
            String name = flag.contains("=") ? flag.substring(0, flag.indexOf('=')) : flag;
            String value;
            if (flag.contains("=")) {
                value = flag.substring(flag.indexOf('=') + 1);
            } else if (i + 1 < argv.length) {
                value = argv[++i];
            } else {
                throw new IllegalArgumentException("flag needs an argument: -" + name);
            }
            switch (name) {
                case "schemas" -> schemas = Paths.get(value);
                case "signing-key" -> signingKey = value;
                case "label" -> {
                    int eq = value.indexOf('=');
                    if (eq < 0) {
                        throw new IllegalArgumentException("expected key=value, got \"" + value + "\"");
                    }
                    labels.put(value.substring(0, eq), value.substring(eq + 1));
                }
                default -> throw new IllegalArgumentException("flag provided but not defined: -" + name + "\n" + USAGE);
            }
        }
        return new Options(schemas, labels, signingKey, new ArrayList<>(Arrays.asList(argv).subList(i, argv.length)));
    }

    /** The repository's schemas/ directory, from the jar's place: examples/producers/java/target/. */
    static Path defaultSchemas() {
        try {
            Path jar = Paths.get(Produce.class.getProtectionDomain().getCodeSource().getLocation().toURI());
            return jar.getParent().resolve("../../../../schemas").normalize();
        } catch (Exception e) {
            return Paths.get("schemas");
        }
    }

    /**
     * The arguments as UTF-8. Java decodes argv with the locale's charset: under LANG=C (ASCII)
     * "Grüße" arrives as "Gr??e". On Linux the raw bytes are in /proc/self/cmdline (its last
     * argv.length entries), so they are read from there when the locale is not UTF-8.
     */
    static String[] utf8Arguments(String[] argv) {
        String charset = System.getProperty("sun.jnu.encoding", "UTF-8");
        if (charset.equalsIgnoreCase("UTF-8") || argv.length == 0) {
            return argv;
        }
        try {
            byte[] raw = Files.readAllBytes(Paths.get("/proc/self/cmdline"));
            List<String> all = new ArrayList<>();
            ByteArrayOutputStream current = new ByteArrayOutputStream();
            for (byte b : raw) {
                if (b == 0) {
                    all.add(current.toString(StandardCharsets.UTF_8));
                    current.reset();
                } else {
                    current.write(b);
                }
            }
            return all.size() < argv.length ? argv : all.subList(all.size() - argv.length, all.size()).toArray(new String[0]);
        } catch (IOException e) {
            return argv; // not Linux: the locale's decoding stands
        }
    }
}
