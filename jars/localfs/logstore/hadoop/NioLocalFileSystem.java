package logstore.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed local file system ({@code fs.file.impl}) over {@link NioRawLocalFileSystem}: the
 * {@code FileSystem} API (Parquet and Delta files Spark writes) without a process per file created.
 */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
